"""zarr-python's own store conformance suite (``zarr.testing.store.StoreTests``) run
against ZarrStore in both modes (pass-through and inner-chunks) on memory, local files
and S3 (SeaweedFS).

Deviations, each justified where it is made:

* ``test_serializable_store`` on memory: a ZarrStore over a Store object or a memory
  store refuses to pickle (``TypeError``), since another process could not reopen it;
  the test checks that refusal instead. Local and S3 stores, opened from URLs, run the
  test unchanged.
* The suite's synchronous-store tests (``get_sync``, ``set_sync``, ``delete_sync`` and
  their parity with the async methods) run: ZarrStore implements zarr's synchronous
  store surface on a background event loop.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from zarr.core.buffer import Buffer, cpu
from zarr.testing.store import StoreTests

from asyncshard.backends import MemoryStore
from asyncshard.zarr_python import ZarrStore


class _AsyncshardStoreTests(StoreTests[ZarrStore, cpu.Buffer]):
    """The suite's hooks: ``set``/``get`` bypass ZarrStore through the asyncshard store."""

    store_cls = ZarrStore
    buffer_cls = cpu.Buffer
    mode = "pass-through"

    async def set(self, store: ZarrStore, key: str, value: Buffer) -> None:
        await store.inner.set(key, value.to_bytes())

    async def get(self, store: ZarrStore, key: str) -> Buffer:
        data = await store.inner.get(key)
        assert data is not None, key
        return self.buffer_cls.from_bytes(data)

    def test_store_repr(self, store: ZarrStore) -> None:
        assert repr(store) == f"ZarrStore({store.inner!r}, mode={self.mode!r}, read_only=False)"

    def test_store_supports_writes(self, store: ZarrStore) -> None:
        assert store.supports_writes and store.supports_deletes

    def test_store_supports_listing(self, store: ZarrStore) -> None:
        assert store.supports_listing


class TestMemory(_AsyncshardStoreTests):
    @pytest.fixture
    def store_kwargs(self) -> dict[str, Any]:
        return {"store": MemoryStore(), "mode": self.mode}

    async def test_serializable_store(self, store: ZarrStore) -> None:
        # Deviation (see the module docstring): a memory store has no place to reopen.
        with pytest.raises(TypeError, match="build the ZarrStore from a URL"):
            pickle.dumps(store)


class TestLocal(_AsyncshardStoreTests):
    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        return {"store": str(tmp_path / "root"), "mode": self.mode}


class TestS3(_AsyncshardStoreTests):
    @pytest.fixture
    def store_kwargs(self, s3_place: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        url, options = s3_place
        return {"store": url, "mode": self.mode, **options}


class TestMemoryInnerChunks(TestMemory):
    mode = "inner-chunks"


class TestLocalInnerChunks(TestLocal):
    mode = "inner-chunks"


class TestS3InnerChunks(TestS3):
    mode = "inner-chunks"
