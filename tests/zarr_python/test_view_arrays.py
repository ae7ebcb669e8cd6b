"""zarr-python through the inner-chunk view, on local files and S3 (SeaweedFS): request
budgets counted at the backend, writes that land as ordinary sharded Zarr, metadata
mapped back, explicit sharding, and what is refused.

The array: 64x64 uint16, shards 32x32 of 16 inner chunks 8x8 (zstd), 4 shards.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu
from zarr.core.sync import sync

from asyncshard.errors import InvalidMetadataError, UnsupportedOperationError
from asyncshard.zarr_python import ShardRewriteWarning, ZarrStore, modes

SHAPE, SHARD, CHUNK = (64, 64), (32, 32), (8, 8)
DATA = np.arange(64 * 64, dtype="uint16").reshape(SHAPE)


@pytest.fixture
def view(zarr_store: ZarrStore, monkeypatch: pytest.MonkeyPatch) -> ZarrStore:
    """An inner-chunk ZarrStore over ``zarr_store``, which holds DATA sharded at ``arr``.

    Its write window is long (0.25 s) so that budgets do not depend on how quickly
    zarr-python's chunk writes follow each other on a loaded machine: full batches and
    whole shards leave at once anyway.
    """
    zarr_store.create_sharded_array("arr", shape=SHAPE, chunks=CHUNK, shards=SHARD, dtype="uint16")[
        ...
    ] = DATA
    monkeypatch.setattr(modes, "WRITE_WINDOW", 0.25)
    return ZarrStore(zarr_store.inner, mode="inner-chunks")


def _reads(store: ZarrStore, arr: Any, selection: Any, expected: Any = DATA) -> dict[str, int]:
    store.stats.reset()
    np.testing.assert_array_equal(arr[selection], expected[selection])
    return dict(store.stats.requests)


def _writes(store: ZarrStore, arr: Any, selection: Any, value: Any) -> dict[str, int]:
    store.stats.reset()
    arr[selection] = value
    return dict(store.stats.requests)


def _stored(store: ZarrStore, key: str) -> dict[str, Any]:
    raw = sync(store.inner.get(key))
    assert raw is not None, key
    doc: dict[str, Any] = json.loads(bytes(raw))
    return doc


def _keys(store: ZarrStore, prefix: str) -> list[str]:
    async def collect() -> list[str]:
        return sorted([k async for k in store.inner.list_prefix(prefix)])

    return sync(collect())


def test_read_budgets(view: ZarrStore) -> None:
    arr = zarr.open_array(view, path="arr", mode="r")
    assert arr.shards is None and arr.chunks == CHUNK  # the shards are invisible
    assert _reads(view, arr, np.s_[0:8, 0:8]) == {"get": 2}  # cold: index + chunk
    assert _reads(view, arr, np.s_[0:8, 0:8]) == {"get": 1}  # warm (pass-through: 2)
    assert _reads(view, arr, np.s_[8:16, 16:24]) == {"get": 1}  # another chunk, warm index
    # 4 chunks of an uncached shard: 1 index request + 1 coalesced data request
    assert _reads(view, arr, np.s_[0:16, 32:48]) == {"get": 2}  # pass-through: 5
    # every chunk of an uncached shard, all asked at once: the whole shard in 1 request
    with zarr.config.set({"async.concurrency": 16}):
        assert _reads(view, arr, np.s_[32:64, 0:32]) == {"get": 1}
    # 8 chunks of an uncached shard, all handed over at once (async.concurrency 10):
    # the index, then one coalesced data request
    with zarr.config.set({"async.concurrency": 10}):
        assert _reads(view, arr, np.s_[32:64, 32:48]) == {"get": 2}
        # 16 chunks (index cached): a first burst of 10 reaches the store in one tick and
        # costs one request; the other 6 follow as zarr-python's tasks finish, over as
        # many ticks as the scheduler spreads them (one request per tick), so only the
        # bound is fixed: far below one request per chunk
        assert _reads(view, arr, np.s_[32:64, 32:64])["get"] <= 1 + 6


def test_writes_cut_short_by_zarr_concurrency_warn(view: ZarrStore) -> None:
    """A shard written in parts because zarr-python hands over fewer chunk writes at once
    than the shard holds gets a ShardRewriteWarning naming the setting; writes that are
    not held back by it (a whole shard, or fewer chunks than the bound) get none."""
    arr = zarr.open_array(view, path="arr", mode="r+")
    with (
        zarr.config.set({"async.concurrency": 4}),
        pytest.warns(ShardRewriteWarning, match="async.concurrency"),
    ):
        # 4 read-merge-writes, the last three starting from the shard as written
        assert _writes(view, arr, np.s_[32:64, 32:64], 5) == {"get": 1, "put": 4}
    # recorded, not raised: the view warns from zarr-python's event loop thread
    with zarr.config.set({"async.concurrency": 16}), warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", ShardRewriteWarning)
        assert _writes(view, arr, np.s_[32:64, 32:64], 6) == {"put": 1}  # whole shard
        assert _writes(view, arr, np.s_[32:64, 32:48], 7) == {"put": 1}  # 8 of 16, as kept
        # 12 chunks of each of two shards: zarr is at its bound, but the bound covers a
        # shard, so raising it would not help
        _writes(view, arr, np.s_[0:64, 0:24], 8)
    assert not [w for w in got if issubclass(w.category, ShardRewriteWarning)]
    expected = DATA.copy()
    expected[32:64, 32:64], expected[32:64, 32:48], expected[0:64, 0:24] = 6, 7, 8
    np.testing.assert_array_equal(zarr.open_array(view, path="arr", mode="r")[...], expected)


def test_a_lone_chunk_write_is_no_shard_written_in_parts(view: ZarrStore) -> None:
    """One chunk written alone, even with zarr-python's bound at 1 (every write leaves
    at once, incomplete), is no shard written in parts: nothing of its shard follows."""
    arr = zarr.open_array(view, path="arr", mode="r+")
    with zarr.config.set({"async.concurrency": 1}), warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", ShardRewriteWarning)
        arr[0:8, 0:8] = 9
    assert not [w for w in got if issubclass(w.category, ShardRewriteWarning)]
    assert (zarr.open_array(view, path="arr", mode="r")[0:8, 0:8] == 9).all()


def test_write_budgets(view: ZarrStore) -> None:
    arr = zarr.open_array(view, path="arr", mode="r+")
    ones = np.ones((32, 32), "uint16")
    # every chunk of a shard at once: the shard is built and written without reading it
    with zarr.config.set({"async.concurrency": 16}):
        assert _writes(view, arr, np.s_[32:64, 0:32], ones) == {"put": 1}
    # default concurrency: 10 chunks, then 6 -> two conditional read-merge-writes, the
    # second from the shard as the first wrote it (no read)
    assert _writes(view, arr, np.s_[32:64, 32:64], 2 * ones) == {"get": 1, "put": 2}
    # one inner chunk: a conditional read-merge-write of its shard
    assert _writes(view, arr, np.s_[0:8, 0:8], 3) == {"get": 1, "put": 1}
    expected = DATA.copy()
    expected[32:64, 0:32], expected[32:64, 32:64], expected[0:8, 0:8] = 1, 2, 3
    plain = zarr.open_array(ZarrStore(view.inner), path="arr", mode="r")
    assert plain.shards == SHARD
    np.testing.assert_array_equal(plain[...], expected)


def test_writes_land_as_ordinary_sharded_zarr(view: ZarrStore) -> None:
    arr = zarr.open_array(view, path="arr", mode="r+")
    region = np.s_[3:61, 10:50]  # unaligned, across all four shards
    values = np.random.default_rng(0).integers(0, 60000, (58, 40), dtype="uint16")
    arr[region] = values
    arr[40:48, 0:8] = 0  # a chunk of fill values: zarr-python deletes it
    expected = DATA.copy()
    expected[region] = values
    expected[40:48, 0:8] = 0
    np.testing.assert_array_equal(arr[...], expected)
    plain = zarr.open_array(ZarrStore(view.inner), path="arr", mode="r")
    assert plain.shards == SHARD and plain.chunks == CHUNK
    np.testing.assert_array_equal(plain[...], expected)
    assert _keys(view, "arr/c/") == ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/1/1"]


def test_attributes_and_resize_map_back(view: ZarrStore) -> None:
    arr = zarr.open_array(view, path="arr", mode="r+")
    _reads(view, arr, np.s_[0:8, 0:8])  # caches the shard index
    arr.attrs["note"] = "kept"
    stored = _stored(view, "arr/zarr.json")
    assert stored["attributes"] == {"note": "kept"}
    assert stored["chunk_grid"]["configuration"]["chunk_shape"] == list(SHARD)
    assert stored["codecs"][0]["name"] == "sharding_indexed"
    assert _reads(view, arr, np.s_[0:8, 0:8]) == {"get": 3}  # metadata reloaded, index kept
    arr.resize((40, 72))  # shrink the rows (chunks deleted first), grow the columns
    arr[32:40, 64:72] = 7
    stored = _stored(view, "arr/zarr.json")
    assert stored["shape"] == [40, 72] and stored["attributes"] == {"note": "kept"}
    assert stored["chunk_grid"]["configuration"]["chunk_shape"] == list(SHARD)
    expected = np.zeros((40, 72), "uint16")
    expected[:, :64] = DATA[:40]
    expected[32:40, 64:72] = 7
    plain = zarr.open_array(ZarrStore(view.inner), path="arr", mode="r")
    assert plain.shards == SHARD and plain.attrs["note"] == "kept"
    np.testing.assert_array_equal(plain[...], expected)
    np.testing.assert_array_equal(zarr.open_array(view, path="arr")[...], expected)


def test_a_view_sees_an_array_grown_elsewhere(view: ZarrStore) -> None:
    np.testing.assert_array_equal(zarr.open_array(view, path="arr")[0:8, 0:8], DATA[0:8, 0:8])
    other = ZarrStore(view.inner, mode="inner-chunks")  # another process, say
    zarr.open_array(other, path="arr", mode="r+").resize((64, 96))
    chunk = sync(view.get("arr/c/0/0"))
    assert chunk is not None
    sync(view.set("arr/c/0/10", chunk))  # outside the shape this view last saw
    grown = zarr.open_array(ZarrStore(view.inner), path="arr", mode="r")
    np.testing.assert_array_equal(grown[0:8, 80:88], DATA[0:8, 0:8])


def test_metadata_that_cannot_map_back_is_refused(view: ZarrStore) -> None:
    before = _stored(view, "arr/zarr.json")
    presented = json.loads(sync(view.get("arr/zarr.json")).to_bytes())  # type: ignore[union-attr]
    for member, value in [
        ("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [16, 16]}}),
        ("data_type", "int32"),
        ("codecs", [{"name": "bytes", "configuration": {"endian": "big"}}]),
        ("shape", [64, 64, 2]),
    ]:
        doc = {**presented, member: value}
        with pytest.raises(InvalidMetadataError, match=member):
            sync(view.set("arr/zarr.json", cpu.Buffer.from_bytes(json.dumps(doc).encode())))
    assert _stored(view, "arr/zarr.json") == before


def test_sharded_arrays_are_created_explicitly(view: ZarrStore) -> None:
    with pytest.raises(UnsupportedOperationError, match="create_sharded_array"):
        zarr.create_array(view, name="new", shape=(16,), chunks=(4,), shards=(8,), dtype="u1")
    assert _keys(view, "new/") == []
    new = view.create_sharded_array("new", shape=(16,), chunks=(4,), shards=(8,), dtype="u1")
    assert new.shards is None and new.chunks == (4,)
    new[...] = np.arange(16, dtype="u1")
    assert _keys(view, "new/") == ["new/c/0", "new/c/1", "new/zarr.json"]  # two shards
    assert _stored(view, "new/zarr.json")["codecs"][0]["name"] == "sharding_indexed"
    plain = zarr.open_array(ZarrStore(view.inner), path="new")
    np.testing.assert_array_equal(plain[...], np.arange(16))


def test_overwriting_a_sharded_array_removes_its_shards(view: ZarrStore) -> None:
    zarr.open_array(view, path="arr")[0:8, 0:8]  # the view knows the sharded array
    over = zarr.create_array(view, name="arr", shape=(4,), chunks=(2,), dtype="u1", overwrite=True)
    over[...] = 5
    assert _keys(view, "arr/") == ["arr/c/0", "arr/c/1", "arr/zarr.json"]
    np.testing.assert_array_equal(zarr.open_array(view, path="arr")[...], [5] * 4)


def test_deleting_a_folder_inside_an_array_erases_only_its_chunks(view: ZarrStore) -> None:
    sync(view.delete_dir("arr/c/1"))  # the chunk row 1 (rows 8..16): shares shards with others
    expected = DATA.copy()
    expected[8:16] = 0
    np.testing.assert_array_equal(zarr.open_array(view, path="arr")[...], expected)
    assert _keys(view, "arr/c/") == ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/1/1"]
