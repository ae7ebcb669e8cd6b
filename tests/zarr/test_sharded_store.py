"""ZarrShardedStore: request budgets, shard layout, staleness, races and bad shards.

What every Store does (ranges, conditions, partial writes, listing, erasing) is checked
by the conformance suite (``tests/conformance/test_adapters.py``) with chunk keys; here
only what is Zarr's. Budgets are asserted on the wrapped store's counters: every ``get``
there is one request to the backend.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.cache import LoadingCache
from asyncshard.errors import (
    AsyncShardError,
    ChecksumError,
    ConflictError,
    CorruptShardError,
    InvalidKeyError,
    InvalidMetadataError,
)
from asyncshard.formats.zarr3.shard import IndexLayout, empty_index, encode_index, encode_shard
from asyncshard.ranges import Range
from asyncshard.sharding import open_sharded
from asyncshard.sharding.engine.indexes import KEPT_SHARDS
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store
from tests.zarr.helpers import array_doc, chunk_bytes, sharded

# 2-D array 40x40, shards 16x16, inner chunks 4x4 -> 4x4 chunks per shard, 3x3 shards
DOC = array_doc([40, 40], [16, 16], [4, 4])
NBYTES = 16  # uint8 4x4


def all_chunks() -> dict[str, bytes]:
    return {f"arr/c/{i}/{j}": chunk_bytes((i, j), NBYTES) for i in range(10) for j in range(10)}


@pytest.fixture(params=["memory", "local"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path)


async def filled(inner: Store) -> ZarrShardedStore:
    store = await sharded(inner, DOC)
    await store.set_values(all_chunks())
    store.cache.clear()
    inner.stats.reset()
    return store


async def test_cold_chunk_costs_two_requests_then_one(inner: Store) -> None:
    store = await filled(inner)
    assert await store.get("arr/c/5/6") == chunk_bytes((5, 6), NBYTES)
    assert inner.stats.requests["get"] == 2  # index, data
    assert await store.get("arr/c/5/7") == chunk_bytes((5, 7), NBYTES)
    assert inner.stats.requests["get"] == 3  # same shard: data only
    assert inner.stats.total_requests == 3


async def test_k_chunks_of_one_shard_cost_index_plus_one(inner: Store) -> None:
    store = await filled(inner)
    keys = [f"arr/c/{i}/{j}" for i in range(4, 8) for j in range(4, 7)]  # 12 chunks, shard (1,1)
    values = await store.get_partial_values([(k, None) for k in keys])
    assert [bytes(v or b"") for v in values] == [all_chunks()[k] for k in keys]
    assert inner.stats.requests["get"] == 2


async def test_every_chunk_of_a_shard_costs_one_request(inner: Store) -> None:
    store = await filled(inner)
    keys = [f"arr/c/{i}/{j}" for i in range(4, 8) for j in range(4, 8)]
    values = await store.get_partial_values([(k, None) for k in keys])
    assert [bytes(v or b"") for v in values] == [all_chunks()[k] for k in keys]
    assert inner.stats.requests["get"] == 1
    # the whole-shard read also filled the index cache
    assert await store.get("arr/c/4/4") == all_chunks()["arr/c/4/4"]
    assert inner.stats.requests["get"] == 2


async def test_every_chunk_of_an_edge_shard_costs_one_request(inner: Store) -> None:
    store = await filled(inner)
    keys = [f"arr/c/{i}/{j}" for i in (8, 9) for j in (8, 9)]  # shard (2,2) holds 2x2 chunks
    values = await store.get_partial_values([(k, None) for k in keys])
    assert [bytes(v or b"") for v in values] == [all_chunks()[k] for k in keys]
    assert inner.stats.requests["get"] == 1


async def test_concurrent_cold_reads_share_one_index_request(inner: Store) -> None:
    store = await filled(inner)
    keys = [f"arr/c/{i}/{j}" for i in range(2) for j in range(4)] * 8  # 64 reads, 8 chunks
    values = await asyncio.gather(*(store.get(k) for k in keys))
    assert [bytes(v or b"") for v in values] == [all_chunks()[k] for k in keys]
    assert store.cache.stats.misses == 1
    # one index request; the concurrent reads were batched into one coalesced data request
    assert inner.stats.requests["get"] == 2


async def test_concurrent_reads_of_a_whole_shard_cost_one_request(inner: Store) -> None:
    store = await filled(inner)
    keys = [f"arr/c/{i}/{j}" for i in range(4) for j in range(4)] * 4  # every chunk, 4 times
    values = await asyncio.gather(*(store.get(k) for k in keys))
    assert [bytes(v or b"") for v in values] == [all_chunks()[k] for k in keys]
    assert inner.stats.requests["get"] == 1


async def test_a_corrupt_shard_fails_only_its_own_batched_reads() -> None:
    inner = MemoryStore()
    store = await filled(inner)
    await inner.set("arr/c/1/1", b"garbage that is no shard")
    good, bad = store.get("arr/c/0/0"), store.get("arr/c/5/5")
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert results[0] == all_chunks()["arr/c/0/0"]
    assert isinstance(results[1], CorruptShardError)


async def test_whole_shard_write_does_not_read(inner: Store) -> None:
    store = await sharded(inner, DOC)
    shard = {f"arr/c/{i}/{j}": chunk_bytes((i, j), NBYTES) for i in range(4) for j in range(4)}
    await store.set_values(shard)
    assert inner.stats.requests["get"] == 0 and inner.stats.requests["put"] == 1
    assert [k async for k in inner.list_prefix("arr/c/")] == ["arr/c/0/0"]


async def test_partial_write_merges_and_erasing_last_chunk_deletes_shard(inner: Store) -> None:
    store = await sharded(inner, DOC)
    await store.set("arr/c/1/1", b"first")
    await store.set("arr/c/1/2", b"second")
    inner.stats.reset()
    await store.set("arr/c/1/1", b"replaced")  # merged into the shard as this store wrote it
    assert inner.stats.requests["get"] == 0 and inner.stats.requests["put"] == 1
    other = await sharded(inner, DOC)  # another writer reads the shard first
    inner.stats.reset()
    await other.set("arr/c/1/1", b"replaced")
    assert inner.stats.requests["get"] == 1 and inner.stats.requests["put"] == 1
    assert await store.get("arr/c/1/1") == b"replaced"
    assert await store.get("arr/c/1/2") == b"second"
    await store.erase_values(["arr/c/1/1"])
    assert await inner.exists("arr/c/0/0")
    await store.erase_values(["arr/c/1/2"])
    assert not await inner.exists("arr/c/0/0")
    assert await store.get("arr/c/1/2") is None


async def test_kept_shards_follow_the_adapters_own_changes(inner: Store) -> None:
    """The copy of a shard an adapter keeps goes when the adapter itself deletes the
    shard another way (``erase_prefix``) and when it is closed: no conditional write is
    then sent from a copy that is gone."""
    store = await sharded(inner, DOC)
    await store.set("arr/c/1/1", b"first")
    assert KEPT_SHARDS.peek((store.indexes.namespace, "arr/c/0/0")) is not None
    await store.erase_prefix("arr/")
    inner.stats.reset()
    await store.set("arr/c/1/1", b"again")
    assert inner.stats.requests["put"] == 1  # no failed write from a copy first
    assert await store.get("arr/c/1/1") == b"again"
    await store.close()
    assert KEPT_SHARDS.peek((store.indexes.namespace, "arr/c/0/0")) is None


async def test_writers_taking_turns_on_a_shard_stop_keeping_it(inner: Store) -> None:
    """Two adapters (two processes) updating one shard in turn: each one's kept copy is
    always out of date, so after one failed write from it a writer keeps none for a
    while and every update is one read and one write."""
    a, b = await sharded(inner, DOC), await sharded(inner, DOC)
    await a.set("arr/c/0/0", b"a")
    await b.set("arr/c/0/1", b"b")
    inner.stats.reset()
    for n in range(10):
        await a.set("arr/c/0/0", b"a%d" % n)
        await b.set("arr/c/0/1", b"b%d" % n)
    assert inner.stats.requests["put"] <= 20 + 2  # at most one failed write per writer
    assert await a.get("arr/c/0/1") == b"b9" and await b.get("arr/c/0/0") == b"a9"


async def test_rewritten_shard_never_yields_wrong_bytes(inner: Store) -> None:
    reader = await filled(inner)
    writer = await sharded(inner, DOC)  # its own cache
    assert await reader.get("arr/c/0/0") == all_chunks()["arr/c/0/0"]
    # rewrite shard (0,0) with chunks of another size, so every offset moves
    await writer.set_values(
        {f"arr/c/{i}/{j}": bytes([i * 4 + j]) * (3 + i + j) for i in range(4) for j in range(4)}
    )
    inner.stats.reset()
    assert await reader.get("arr/c/1/2") == bytes([6]) * 6
    assert inner.stats.requests["get"] == 3  # stale data read, fresh index, data
    await writer.erase_values([f"arr/c/{i}/{j}" for i in range(4) for j in range(4)])
    assert not await inner.exists("arr/c/0/0")  # the emptied shard is gone
    assert await reader.get("arr/c/1/2") is None


async def corrupt_store(blob: bytes) -> ZarrShardedStore:
    inner = MemoryStore()
    store = await sharded(inner, DOC)
    await inner.set("arr/c/0/0", blob)
    return store


def good_shard() -> bytearray:
    layout = IndexLayout((4, 4))
    return bytearray(encode_shard({(0, 0): b"x" * 16, (1, 1): b"y" * 16}, layout))


async def test_flipped_index_byte_is_a_checksum_error_naming_the_shard() -> None:
    blob = good_shard()
    blob[-10] ^= 0xFF
    store = await corrupt_store(bytes(blob))
    with pytest.raises(ChecksumError, match="arr/c/0/0"):
        await store.get("arr/c/0/0")


def shard_with_index(entries: dict[tuple[int, int], tuple[int, int]], data: bytes) -> bytes:
    layout = IndexLayout((4, 4))
    index = empty_index(layout)
    for pos, entry in entries.items():
        index[pos] = entry
    return data + encode_index(index, layout)


@pytest.mark.parametrize(
    "blob",
    [
        bytes(good_shard())[:-1],  # truncated: the index is one byte short
        bytes(good_shard())[20:],  # truncated at the front: offsets point past the data
        shard_with_index({(0, 0): (1000, 16)}, b"z" * 16),  # offset past the end
        shard_with_index({(0, 0): (0, 2**64 - 1)}, b"z" * 16),  # half-empty entry
        b"tiny",  # smaller than the index
    ],
    ids=["truncated", "front-cut", "offset-past-end", "half-empty", "tiny"],
)
async def test_damaged_shards_raise_typed_errors(blob: bytes) -> None:
    store = await corrupt_store(blob)
    with pytest.raises(CorruptShardError, match="arr/c/0/0"):
        await store.get("arr/c/0/0")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_as_a_shard_raise_only_asyncshard_errors(blob: bytes) -> None:
    async def check() -> None:
        store = await corrupt_store(blob)
        try:
            await store.get_partial_values([("arr/c/0/0", None), ("arr/c/1/1", Range(0, 4))])
            [k async for k in store.list()]
        except AsyncShardError:
            pass

    asyncio.run(check())


async def test_open_sharded_from_a_url(tmp_path: Path) -> None:
    await sharded(LocalStore(tmp_path), DOC)
    store = await open_sharded(str(tmp_path), "arr")
    await store.set("arr/c/3/3", b"via url")
    assert await (await open_sharded(f"file://{tmp_path}", "arr")).get("arr/c/3/3") == b"via url"


async def test_draft_transformer_arrays() -> None:
    inner = MemoryStore()
    doc = {
        "shape": [8, 8],
        "data_type": "uint8",
        "chunk_grid": {"type": "regular", "chunk_shape": [2, 2], "separator": "/"},
        "chunk_memory_layout": "C",
        "fill_value": 0,
        "storage_transformers": [
            {"type": "indexed", "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
             "configuration": {"chunks_per_shard": [2, 2]}}
        ],
    }  # fmt: skip
    await inner.set("meta/root/arr.array.json", json.dumps(doc).encode())
    store = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
    await store.set_values({"data/root/arr/c2/3": b"abcd", "data/root/arr/c3/3": b"efgh"})
    # the storage transformer draft: chunk (2,3) lives in shard (1,1); index at the end, no checksum
    shard = await inner.get("data/root/arr/c1/1")
    assert shard is not None and len(shard) == 8 + 16 * 4
    assert await store.get("data/root/arr/c3/3") == b"efgh"
    assert sorted([k async for k in store.list_prefix("data/root/arr/")]) == [
        "data/root/arr/c2/3",
        "data/root/arr/c3/3",
    ]


async def test_unsharded_or_missing_arrays_are_refused() -> None:
    inner = MemoryStore()
    flat = dict(DOC, codecs=[{"name": "bytes", "configuration": {"endian": "little"}}])
    await inner.set("flat/zarr.json", json.dumps(flat).encode())
    with pytest.raises(InvalidMetadataError, match="not sharded"):
        await ZarrShardedStore.open(inner, "flat")
    with pytest.raises(InvalidMetadataError, match="no array metadata"):
        await ZarrShardedStore.open(inner, "nothing")
    await inner.set("bad/zarr.json", b"{not json")
    with pytest.raises(InvalidMetadataError, match="not valid JSON"):
        await ZarrShardedStore.open(inner, "bad")


class HeldDeletes(MemoryStore):
    """A MemoryStore whose deletes wait until ``release`` is set (to open a race window)."""

    def __init__(self, conditional_deletes: bool) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self._conditional_deletes = conditional_deletes

    @property
    def supports_conditional_deletes(self) -> bool:
        return self._conditional_deletes

    async def _erase(self, key: str) -> None:
        await self.release.wait()
        await super()._erase(key)

    async def _erase_if_match(self, key: str, version: str) -> None:
        await self.release.wait()
        await super()._erase_if_match(key, version)


@pytest.mark.parametrize("conditional_deletes", [True, False])
async def test_erasing_the_last_chunk_never_loses_a_concurrent_write(
    conditional_deletes: bool,
) -> None:
    inner = HeldDeletes(conditional_deletes)
    eraser, writer = await sharded(inner, DOC), await sharded(inner, DOC)
    await eraser.set("arr/c/0/0", b"only chunk")
    erase = asyncio.ensure_future(eraser.erase_values(["arr/c/0/0"]))
    await asyncio.sleep(0.01)  # the eraser has read the shard and waits to delete it
    await writer.set("arr/c/0/1", b"written meanwhile")
    inner.release.set()
    await erase
    reader = await sharded(inner, DOC)
    assert await reader.get("arr/c/0/1") == b"written meanwhile"
    assert await reader.get("arr/c/0/0") is None


async def test_without_conditional_deletes_an_emptied_shard_becomes_an_empty_index() -> None:
    inner = HeldDeletes(conditional_deletes=False)
    inner.release.set()
    store = await sharded(inner, DOC)
    await store.set_values({"arr/c/0/0": b"a", "arr/c/0/1": b"b"})
    await store.erase_values(["arr/c/0/0"])
    await store.erase_values(["arr/c/0/1"])
    shard = await inner.get("arr/c/0/0")
    assert shard is not None and len(shard) == 16 * 16 + 4  # index only, every entry empty
    assert [k async for k in store.list_prefix("arr/c/")] == []
    assert await store.get("arr/c/0/1") is None


async def test_chunk_keys_past_the_array_edge_are_refused_consistently() -> None:
    """Past-edge chunk keys are no chunks of the array: writes refuse them (before writing
    anything), reads find nothing, erasing ignores them and listings never show them; so
    an edge shard's whole-shard write can drop nothing anyone wrote through us."""
    inner = MemoryStore()
    store = await sharded(inner, array_doc([3], [2], [1]))  # chunks 0..2; shard 1 = {2, 3}
    await store.set("arr/c/2", b"in bounds")
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.set("arr/c/3", b"past the edge")
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.set_values({"arr/c/0": b"a", "arr/c/3": b"past the edge"})
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.set_partial_values([("arr/c/3", 0, b"x")])
    assert await store.get("arr/c/0") is None, "nothing of the refused call was written"
    assert await store.get("arr/c/3") is None and await store.head("arr/c/3") is None
    await store.erase_values(["arr/c/3"])  # holds nothing: ignored
    assert await store.get("arr/c/2") == b"in bounds"
    await store.set_values({"arr/c/2": b"whole edge shard"})  # covers shard 1: no read
    assert [k async for k in store.list_prefix("arr/c/")] == ["arr/c/2"]


async def test_a_failed_read_condition_costs_no_extra_request(inner: Store) -> None:
    store = await filled(inner)
    await store.get("arr/c/0/0")
    inner.stats.reset()
    with pytest.raises(ConflictError):
        await store.get_object("arr/c/0/0", if_match="not-the-version")
    assert inner.stats.total_requests == 0  # answered from the cached index


async def test_listing_a_row_reads_only_that_row_of_shards(inner: Store) -> None:
    store = await filled(inner)
    keys = sorted([k async for k in store.list_prefix("arr/c/5/")])
    assert keys == [f"arr/c/5/{j}" for j in sorted(range(10), key=str)]
    assert inner.stats.requests["get"] == 3  # the shards of row 1 only: (1,0), (1,1), (1,2)


async def test_absurd_numbers_are_not_chunk_keys_and_huge_shards_are_refused() -> None:
    inner = MemoryStore()
    store = await sharded(inner, DOC)
    assert await store.get("arr/c/" + "9" * 5000 + "/0") is None  # passes through: missing
    with pytest.raises(InvalidMetadataError, match="chunks_per_shard"):
        await sharded(MemoryStore(), array_doc([2**20, 2**20], [2**20, 2**20], [64, 64]))


async def test_erasing_the_chunk_prefix_keeps_everything_else() -> None:
    """``erase_prefix("arr/c")`` holds every chunk: it deletes the shards directly, and
    only what starts with that string (the metadata and other objects stay)."""
    inner = MemoryStore()
    store = await sharded(inner, DOC)
    await store.set_values(all_chunks())
    await inner.set("arr/attributes.txt", b"kept")
    await inner.set("arr/cx", b"starts with arr/c: erased like the chunks")
    await store.erase_prefix("arr/c")
    remaining = sorted([k async for k in inner.list()])
    assert remaining == ["arr/attributes.txt", "arr/zarr.json"]
    assert await store.get("arr/c/0/0") is None
