"""Both directions of the obspec adapters pass asyncshard's conformance suite.

``from_obspec`` wraps obstore's in-memory, local-file and S3 stores (obstore stores are
obspec clients); ``from_obspec(to_obspec(store))`` runs every verb through obspec's
protocols and back, so ``to_obspec`` is held to the same contract.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import obstore.store
import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.obspec import from_obspec, to_obspec
from asyncshard.testing import Harness, StoreConformance
from tests.obspec.conftest import s3_client
from tests.servers.s3 import S3Server


class TestObstoreMemory(StoreConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        async with from_obspec(obstore.store.MemoryStore()) as store:
            yield Harness(store)


class TestObstoreLocal(StoreConformance):
    """obstore's LocalStore cannot update conditionally (``PutMode::Update`` is not
    implemented there), so the store says it has no conditional writes."""

    @pytest.fixture
    async def harness(self, tmp_path: Path) -> AsyncIterator[Harness]:
        client = obstore.store.LocalStore(tmp_path, mkdir=True)
        async with from_obspec(client, conditional_writes=False) as store:
            yield Harness(store)


class TestObstoreS3(StoreConformance):
    @pytest.fixture
    async def harness(self, s3_server: S3Server) -> AsyncIterator[Harness]:
        client = s3_client(s3_server, conditional_put="etag")
        async with from_obspec(client) as store:
            yield Harness(store)


class TestRoundTripMemory(StoreConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        async with from_obspec(to_obspec(MemoryStore())) as store:
            yield Harness(store)


class TestRoundTripLocal(StoreConformance):
    @pytest.fixture
    async def harness(self, tmp_path: Path) -> AsyncIterator[Harness]:
        async with from_obspec(to_obspec(LocalStore(tmp_path / "root"))) as store:
            yield Harness(store)
