"""zarr-python arrays through ZarrStore, on local files and S3 (SeaweedFS), and what they cost.

Pass-through mode leaves sharding to zarr-python's codec, which has no index cache: an
inner chunk costs 2 requests (index suffix, chunk range) every time, cold or warm, and
k chunks of one shard 1 + k sequential requests. These budgets are asserted on the
asyncshard store's counters so the inner-chunk view can be compared against them; the
view's headline (1 request per chunk once its shard index is cached) is checked too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from asyncshard.zarr_python import ZarrStore
from tests.servers.fixtures import unique_prefix

SHAPE, SHARD, CHUNK = (64, 64), (32, 32), (8, 8)
DATA = np.arange(64 * 64, dtype="uint16").reshape(SHAPE)


@pytest.fixture
def place(zarr_store: ZarrStore) -> ZarrStore:
    """``zarr_store`` holding ``arr``: DATA in 4 shards of 16 inner chunks, written by zarr."""
    arr = zarr.create_array(
        zarr_store, name="arr", shape=SHAPE, chunks=CHUNK, shards=SHARD, dtype="uint16"
    )
    arr[...] = DATA
    return zarr_store


def _cost(store: ZarrStore, arr: Any, selection: Any) -> dict[str, int]:
    store.stats.reset()
    np.testing.assert_array_equal(arr[selection], DATA[selection])
    return dict(store.stats.requests)


class RecordingZarrStore(ZarrStore):
    """A ZarrStore that counts the reads zarr-python asks of it (in the class: zarr-python
    works on read-only copies of the store it is given)."""

    asked = 0

    async def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        RecordingZarrStore.asked += 1
        return await super().get(key, *args, **kwargs)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        key_ranges = list(key_ranges)
        RecordingZarrStore.asked += len(key_ranges)
        return await super().get_partial_values(prototype, key_ranges)


def test_sharded_array_reads_back_and_costs(place: ZarrStore) -> None:
    arr = zarr.open_array(place, path="arr", mode="r")
    assert arr.shards == SHARD and arr.chunks == CHUNK
    assert _cost(place, arr, np.s_[...]) == {"get": 4}  # whole shards: 1 request each
    assert _cost(place, arr, np.s_[0:32, 32:64]) == {"get": 1}  # one whole shard
    assert _cost(place, arr, np.s_[0:8, 0:8]) == {"get": 2}  # cold: index + chunk
    assert _cost(place, arr, np.s_[0:8, 0:8]) == {"get": 2}  # warm: the same, no cache


def test_pass_through_costs_exactly_what_zarr_asks(place: ZarrStore) -> None:
    """4 chunks of one shard: zarr-python asks for the index, then for the chunks (one
    range each, or fewer coalesced ranges, as its version batches them); each read it asks
    for is one request, never more."""
    recording = RecordingZarrStore(place.inner)
    arr = zarr.open_array(recording, path="arr", mode="r")
    RecordingZarrStore.asked = 0
    cost = _cost(recording, arr, np.s_[0:16, 0:16])
    assert 2 <= RecordingZarrStore.asked <= 5  # 1 index + 1 to 4 chunk ranges
    assert cost == {"get": RecordingZarrStore.asked}


def test_writing_one_inner_chunk_rewrites_its_shard(place: ZarrStore) -> None:
    arr = zarr.open_array(place, path="arr", mode="r+")
    place.stats.reset()
    arr[0:8, 0:8] = 7
    assert dict(place.stats.requests) == {"get": 1, "put": 1}  # read the shard, write it
    expected = DATA.copy()
    expected[0:8, 0:8] = 7
    np.testing.assert_array_equal(zarr.open_array(place, path="arr", mode="r")[...], expected)


def test_inner_chunk_mode_reads_the_same_values_unsharded(place: ZarrStore) -> None:
    view = ZarrStore(place.inner, mode="inner-chunks")
    arr = zarr.open_array(view, path="arr", mode="r")
    assert arr.shards is None and arr.chunks == CHUNK  # the shards are invisible
    np.testing.assert_array_equal(arr[...], DATA)
    _cost(view, arr, np.s_[0:8, 0:8])  # warms the shard index
    assert _cost(view, arr, np.s_[8:16, 0:8]) == {"get": 1}  # pass-through: 2


def test_a_store_that_cannot_write_opens_read_only(tmp_path: Path, http_server: Any) -> None:
    folder = unique_prefix()
    writer = ZarrStore(str(http_server.root / folder))
    zarr.create_array(writer, name="arr", shape=(4,), chunks=(2,), dtype="i2")[...] = 3
    reader = ZarrStore(f"{http_server.url}/{folder}/")  # plain HTTP: no writes, no listing
    assert reader.read_only and not reader.supports_writes and not reader.supports_listing
    np.testing.assert_array_equal(zarr.open_array(reader, path="arr", mode="r")[...], [3] * 4)
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_array(reader, path="arr", mode="r+")
