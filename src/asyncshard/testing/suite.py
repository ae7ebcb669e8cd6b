"""StoreConformance: the whole suite, for a subclass to run against its store."""

from __future__ import annotations

from asyncshard.testing.listing import ListingConformance
from asyncshard.testing.reads import ReadConformance
from asyncshard.testing.writes import WriteConformance

__all__ = ["StoreConformance"]


class StoreConformance(ReadConformance, WriteConformance, ListingConformance):
    """Every conformance test; a subclass provides the ``harness`` fixture.

    Example::

        class TestMyStore(StoreConformance):
            @pytest.fixture
            async def harness(self) -> AsyncIterator[Harness]:
                async with MyStore() as store:
                    yield Harness(store)
    """
