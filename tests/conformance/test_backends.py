"""The conformance suite on every backend: one class, one harness fixture per store.

The cloud stores run against real local servers (moto or MinIO, ``rclone serve s3``, the
GCS fake, a static HTTP server, ``rclone serve webdav``, the asyncshard server); their
harness fixtures are in ``tests/servers/fixtures.py`` and ``server_fixtures.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.testing import Harness, StoreConformance


class TestMemory(StoreConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        async with MemoryStore() as store:
            yield Harness(store)


class TestLocal(StoreConformance):
    @pytest.fixture
    async def harness(self, tmp_path: Path) -> AsyncIterator[Harness]:
        async with LocalStore(tmp_path / "root") as store:
            yield Harness(store)


class _Served(StoreConformance):
    """A store on a test server: the harness is the fixture named ``fixture``."""

    fixture: ClassVar[str]

    @pytest.fixture
    def harness(self, request: pytest.FixtureRequest) -> Harness:
        harness: Harness = request.getfixturevalue(self.fixture)
        return harness


class TestS3(_Served):
    fixture = "s3_store"


class TestRcloneS3(_Served):
    fixture = "rclone_store"


class TestGCS(_Served):
    fixture = "gcs_store"


class TestHTTP(_Served):
    fixture = "http_store"


class TestWebDAV(_Served):
    fixture = "webdav_store"


class TestServer(_Served):
    """obstore's HTTP store reading through the asyncshard server."""

    fixture = "served_store"
