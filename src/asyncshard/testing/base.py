"""The suite's fixtures: the ``harness`` a subclass provides, and views of it that skip
(saying why) where a group of tests does not apply."""

from __future__ import annotations

import pytest

from asyncshard.testing.harness import Harness


def _quirks(harness: Harness) -> str:
    return "; ".join(f"{name}: {why}" for name, why in harness.quirks.items()) or "no quirks"


def _only_if(harness: Harness, applies: bool, why: str) -> Harness:
    """``harness``, or a skip saying why the tests asking for it do not apply."""
    if not applies:
        pytest.skip(f"{why}: these tests do not apply")
    return harness


class ConformanceBase:
    """Fixtures shared by the suite's test classes. The tests are coroutines run by
    pytest-asyncio (marked, so its strict mode runs them too)."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    def harness(self) -> Harness:
        """A fresh store under test: subclasses override this fixture."""
        raise NotImplementedError("a conformance subclass provides the `harness` fixture")

    @pytest.fixture
    def writable(self, harness: Harness) -> Harness:
        """The harness, for tests of writes: skipped on read-only stores, saying so."""
        store = harness.store
        return _only_if(harness, store.supports_writes, f"{store!r} is read-only by design")

    @pytest.fixture
    def conditional(self, writable: Harness) -> Harness:
        """Writable stores that honour write conditions; others are skipped, saying why."""
        store = writable.store
        why = f"{store!r} ignores write conditions ({_quirks(writable)})"
        return _only_if(writable, store.supports_conditional_writes, why)

    @pytest.fixture
    def listable(self, harness: Harness) -> Harness:
        """The harness, for listing tests: skipped on stores that cannot list, saying so."""
        store = harness.store
        return _only_if(harness, store.supports_listing, f"{store!r} has no listing")

    @pytest.fixture
    def structured(self, listable: Harness) -> Harness:
        """Listable harnesses whose key mapping keeps the test keys' folders."""
        why = (
            "the key mapping does not keep the test tree's folders; the listing tests "
            "derived from the stored keys run instead"
        )
        return _only_if(listable, listable.structured, why)
