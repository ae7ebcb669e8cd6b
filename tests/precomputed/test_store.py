"""Uint64ShardedStore and the volume layer: request budgets, keys, shards, staleness,
bad shards.

What every Store does (ranges, conditions, partial writes, listing, erasing) is checked
by the conformance suite (``tests/conformance/test_adapters.py``) with chunk ids and
chunk names; here only what is precomputed's. Budgets are asserted on the wrapped
store's counters: every ``get`` there is one request to the backend. Every store gets a
private ``LoadingCache``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.cache import LoadingCache
from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    CorruptShardError,
    InvalidMetadataError,
)
from asyncshard.formats.precomputed.shard import (
    build_shard,
    decode_minishard_index,
    decode_shard_index,
    encode_shard_index,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import unsharded_info
from asyncshard.ranges import OVERFETCH_SLACK, Range, coalesce
from asyncshard.sharding.precomputed import Uint64ShardedStore, parse_chunk_key
from asyncshard.sharding.volume import PrecomputedVolume, ShardedScale, scale_store
from asyncshard.store import BytesLike, Store
from asyncshard.views import UnshardedView

ENCODINGS = ["raw", "gzip"]
N_CHUNKS = 2000
PREFIX = "vol/s0"


def make_spec(
    encoding: Any = "raw",
    *,
    minishard_bits: int = 3,
    shard_bits: int = 2,
    hash: Any = "murmurhash3_x86_128",
    preshift_bits: int = 0,
) -> ShardingSpec:
    return ShardingSpec(
        preshift_bits=preshift_bits,
        hash=hash,
        minishard_bits=minishard_bits,
        shard_bits=shard_bits,
        minishard_index_encoding=encoding,
        data_encoding=encoding,
    )


def content(chunk_id: int, salt: int = 0) -> bytes:
    """Deterministic, id-specific bytes of an id-dependent length."""
    n = 5 + (chunk_id * 7 + salt) % 40
    return bytes((chunk_id * 31 + salt + i) % 251 for i in range(n))


ALL = {i: content(i) for i in range(N_CHUNKS)}


class RecordingStore(MemoryStore):
    """A MemoryStore that records the conditions of every write."""

    def __init__(self, **options: int) -> None:
        super().__init__(**options)
        self.writes: list[tuple[str, str | None, bool]] = []

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        self.writes.append((key, if_match, if_absent))
        return await super()._set(key, data, if_match, if_absent)


@pytest.fixture(params=["memory", "local"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path, durable=False)


@pytest.fixture(params=ENCODINGS)
def spec(request: pytest.FixtureRequest) -> ShardingSpec:
    return make_spec(request.param)


def open_store(inner: Store, spec: ShardingSpec, prefix: str = PREFIX) -> Uint64ShardedStore:
    return Uint64ShardedStore(inner, spec, prefix=prefix, cache=LoadingCache())


async def filled(inner: Store, spec: ShardingSpec) -> Uint64ShardedStore:
    store = open_store(inner, spec)
    await store.write_shards(ALL)
    store.cache.clear()
    inner.stats.reset()
    return store


def placement(spec: ShardingSpec, ids: list[int]) -> list[tuple[int, int]]:
    shards, minishards = spec.shard_and_minishard(ids)
    return list(zip(shards.tolist(), minishards.tolist(), strict=True))


def ids_in(spec: ShardingSpec, shard: int, minishard: int | None = None) -> list[int]:
    return [
        i
        for i, (s, m) in zip(ALL, placement(spec, list(ALL)), strict=True)
        if s == shard and (minishard is None or m == minishard)
    ]


# --------------------------------------------------------------------------- read budgets


async def test_cold_chunk_costs_three_requests_then_one(inner: Store, spec: ShardingSpec) -> None:
    store = await filled(inner, spec)
    first, second = ids_in(spec, 1, 5)[:2]
    assert await store.get(str(first)) == ALL[first]
    assert inner.stats.requests["get"] == 3  # shard index, minishard index, data
    assert await store.get(str(second)) == ALL[second]
    assert inner.stats.requests["get"] == 4  # same minishard: data only
    other = ids_in(spec, 1, 6)[0]
    assert await store.get(str(other)) == ALL[other]
    assert inner.stats.requests["get"] == 6  # same shard, other minishard: index + data
    assert inner.stats.total_requests == 6


async def test_shard_index_is_one_range_request(spec: ShardingSpec) -> None:
    inner = MemoryStore()
    store = await filled(inner, spec)
    seen: list[Any] = []
    original = inner._get

    async def spy(key: str, rng: Any, if_match: str | None) -> Any:
        seen.append((key, rng, if_match))
        return await original(key, rng, if_match)

    inner._get = spy  # type: ignore[method-assign,assignment]
    chunk = ids_in(spec, 2, 0)[0]
    await store.get(str(chunk))
    shard_key = f"{PREFIX}/2.shard"
    assert seen[0] == (shard_key, Range(0, shard_index_nbytes(spec)), None)
    version = (await inner.head(shard_key)).version  # type: ignore[union-attr]
    assert [s[2] for s in seen[1:]] == [version, version]  # both later reads are conditioned
    meta = await store.head(str(chunk))
    assert meta is not None and meta.version == version  # a chunk's version is its shard's


@pytest.mark.parametrize("max_gap", [0, 64 * 1024])
async def test_hundred_ids_of_one_shard(spec: ShardingSpec, max_gap: int) -> None:
    inner = MemoryStore(max_gap=max_gap)
    store = await filled(inner, spec)
    wanted = ids_in(spec, 3)[:100]
    assert len(wanted) == 100
    minishards = {m for _, m in placement(spec, wanted)}
    # the data ranges of the wanted chunks, from the shard itself, coalesced like the store
    shard = bytes(await inner.get(f"{PREFIX}/3.shard") or b"")
    ranges = [chunk_range(shard, spec, i) for i in wanted]
    data_requests = len(coalesce(ranges, max_gap=max_gap, max_request=inner.max_request))
    inner.stats.reset()

    got = await store.get_chunks(wanted)
    assert got == {i: ALL[i] for i in wanted}
    assert inner.stats.requests["get"] == 1 + len(minishards) + data_requests
    assert len(minishards) == spec.num_minishards  # 100 ids reach every minishard
    if max_gap:  # neighbours share requests, and the bytes sent stay near those wanted
        assert data_requests < len(wanted) // 10
        plan = coalesce(ranges, max_gap=max_gap, max_request=inner.max_request)
        needed = sum(r.end - r.start for r in ranges)
        sent = sum(r.end - r.start for r in plan)
        assert sent <= max(1.5 * needed, needed + OVERFETCH_SLACK * len(plan))


def chunk_range(shard: bytes, spec: ShardingSpec, chunk_id: int) -> Range:
    index = decode_shard_index(shard[: shard_index_nbytes(spec)], spec)
    _, minishard = spec.shard_and_minishard_of(chunk_id)
    start, end = minishard_index_range(index, minishard)
    ids, starts, ends = decode_minishard_index(shard[start:end], spec)
    pos = ids.tolist().index(chunk_id)
    return Range(int(starts[pos]), int(ends[pos]))


async def test_concurrent_cold_reads_are_batched(inner: Store, spec: ShardingSpec) -> None:
    """64 concurrent single reads in one minishard: one shard index, one minishard index
    and the data of all of them in coalesced requests (the chunks are adjacent: one)."""
    store = await filled(inner, spec)
    ids = ids_in(spec, 0, 2)[:16] * 4  # 64 reads, one minishard
    values = await asyncio.gather(*(store.get(str(i)) for i in ids))
    assert [bytes(v or b"") for v in values] == [ALL[i] for i in ids]
    assert store.cache.stats.misses == 2  # one shard index, one minishard index
    assert inner.stats.requests["get"] == 2 + 1


async def test_batches_over_shards_and_missing_chunks(inner: Store, spec: ShardingSpec) -> None:
    store = await filled(inner, spec)
    keys = [str(i) for i in range(0, N_CHUNKS + 50, 7)]
    values = await store.get_partial_values([(k, None) for k in keys])
    assert [None if v is None else bytes(v) for v in values] == [ALL.get(int(k)) for k in keys]
    # every shard index and minishard index once; data coalesced within each shard as far
    # as the over-fetch bound allows (the other six of every seven chunks are not wanted)
    data_requests = inner.stats.requests["get"] - 4 * (1 + spec.num_minishards)
    assert 4 <= data_requests < len(keys) // 4
    fetched = inner.stats.bytes_fetched
    index_bytes = 0
    for shard in range(spec.num_shards):
        raw = bytes(await inner.get(f"{PREFIX}/{spec.shard_filename(shard)}") or b"")
        table = decode_shard_index(raw[: shard_index_nbytes(spec)], spec)
        index_bytes += shard_index_nbytes(spec)
        for minishard in range(spec.num_minishards):
            start, end = minishard_index_range(table, minishard)
            index_bytes += end - start
    if spec.data_encoding == "raw":  # stored bytes are the values
        needed = sum(len(v) for v in values if v is not None)
        sent = fetched - index_bytes
        assert sent <= max(1.5 * needed, needed + OVERFETCH_SLACK * data_requests)


async def test_missing_shard_and_empty_minishard(inner: Store) -> None:
    spec = make_spec(minishard_bits=2, shard_bits=1, hash="identity")
    store = open_store(inner, spec)
    await store.write_shards({0: b"zero", 4: b"four"})  # shard 0, minishard 0 only
    store.cache.clear()
    inner.stats.reset()
    assert await store.get("8") is None  # same minishard, not stored: 2 index requests
    assert inner.stats.requests["get"] == 2
    assert await store.get("1") is None  # empty minishard: the shard index says so
    assert inner.stats.requests["get"] == 2
    assert await store.get("2") is None  # shard 1 does not exist
    assert await store.get("6") is None  # ... and that is cached too
    assert inner.stats.requests["get"] == 3
    assert await store.head("4") is not None and await store.head("5") is None


# --------------------------------------------------------------------------- keys


def test_chunk_keys_are_canonical_decimals() -> None:
    assert parse_chunk_key("0") == 0
    assert parse_chunk_key("18446744073709551615") == 2**64 - 1
    for key in ["", "00", "007", "-1", "+1", "1.0", "0x10", "18446744073709551616", " 1", "1a"]:
        assert parse_chunk_key(key) is None, key


async def test_keys_that_are_no_chunk_ids_pass_through_below_the_prefix(inner: Store) -> None:
    store = open_store(inner, make_spec())
    for key in ["info", "007", "18446744073709551616", "sub/dir/file"]:
        await store.set(key, key.encode())
        assert await inner.get(f"{PREFIX}/{key}") == key.encode()
    await store.set("18446744073709551615", b"largest id")  # a chunk: in a shard
    assert not await inner.exists(f"{PREFIX}/18446744073709551615")
    assert await store.get_chunk(2**64 - 1) == b"largest id"


async def test_open_from_info(inner: Store) -> None:
    spec = make_spec("gzip")
    info = {"@type": "neuroglancer_legacy_mesh", "sharding": spec.to_json()}
    await inner.set("seg/mesh/info", json.dumps(info).encode())
    store = await Uint64ShardedStore.open(inner, "seg/mesh", cache=LoadingCache())
    assert store.spec == spec and store.prefix == "seg/mesh"
    await store.set_chunks({123456789: b"fragment"})
    assert await inner.exists(store.shard_key(123456789))
    assert await store.get_chunk(123456789) == b"fragment"
    await inner.set("seg/info", b'{"sharding": null}')
    with pytest.raises(InvalidMetadataError, match="unsharded"):
        await Uint64ShardedStore.open(inner, "seg")
    await inner.set("bad/info", b'{"sharding": {"@type": "neuroglancer_uint64_sharded_v1"}}')
    with pytest.raises(InvalidMetadataError, match=r"bad/info: sharding\.minishard_bits"):
        await Uint64ShardedStore.open(inner, "bad")
    with pytest.raises(InvalidMetadataError, match="no info"):
        await Uint64ShardedStore.open(inner, "nothing")


# --------------------------------------------------------------------------- writes


async def test_whole_shard_write_does_not_read(spec: ShardingSpec) -> None:
    inner = RecordingStore()
    store = open_store(inner, spec)
    await store.write_shards(ALL)
    assert inner.stats.requests["get"] == 0 and inner.stats.requests["put"] == 4
    assert all(w[1:] == (None, False) for w in inner.writes)  # unconditional
    assert sorted([k async for k in inner.list()]) == [f"{PREFIX}/{s}.shard" for s in range(4)]
    # the written shard indexes are cached: a read costs minishard index + data
    inner.stats.reset()
    assert await store.get_chunk(7) == ALL[7]
    assert inner.stats.requests["get"] == 2


async def test_replacing_a_shard_drops_its_other_chunks(inner: Store, spec: ShardingSpec) -> None:
    store = await filled(inner, spec)
    shard0 = ids_in(spec, 0)
    await store.write_shards({shard0[0]: b"alone"})
    assert await store.get_chunks(shard0) == {shard0[0]: b"alone"}
    one = ids_in(spec, 1)[0]
    assert await store.get_chunk(one) == ALL[one]  # other shards untouched


async def test_partial_update_reads_once_and_writes_conditionally(spec: ShardingSpec) -> None:
    """A writer that did not write the shard itself (another process) reads it once."""
    inner = RecordingStore()
    await filled(inner, spec)
    store = open_store(inner, spec)
    inner.writes.clear()
    shard1 = ids_in(spec, 1)
    version = (await inner.head(f"{PREFIX}/1.shard")).version  # type: ignore[union-attr]
    inner.stats.reset()
    await store.set_chunks({shard1[0]: b"new value", shard1[1]: b"another"})
    assert inner.stats.requests["get"] == 1 and inner.stats.requests["put"] == 1
    assert inner.writes == [(f"{PREFIX}/1.shard", version, False)]
    expected = {i: ALL[i] for i in shard1} | {shard1[0]: b"new value", shard1[1]: b"another"}
    assert await store.get_chunks(shard1) == expected
    # a chunk of a shard that does not exist yet: a read (missing) and an if_absent write
    inner.writes.clear()
    fresh = open_store(inner, spec, prefix="other")
    await fresh.set("5", b"five")
    assert inner.writes == [(fresh.shard_key(5), None, True)]


async def test_a_writer_starts_from_the_shard_it_wrote(spec: ShardingSpec) -> None:
    """A store keeps the shards it wrote: its next partial update of one reads nothing
    and writes conditionally on the version it wrote. When another writer changed the
    shard in between, that write fails and the update is made again on a read: nothing
    is lost. A caller's condition that fails on the kept shard is judged again on a
    read."""
    inner = RecordingStore()
    store = await filled(inner, spec)
    a, b, c, d = ids_in(spec, 1)[:4]
    kept = await inner.head(f"{PREFIX}/1.shard")
    assert kept is not None and kept.version is not None
    inner.writes.clear()
    inner.stats.reset()
    await store.set_chunks({a: b"mine"})
    assert dict(inner.stats.requests) == {"put": 1}
    assert inner.writes == [(f"{PREFIX}/1.shard", kept.version, False)]
    other = open_store(inner, spec)
    await other.set_chunks({b: b"theirs"})
    inner.stats.reset()
    await store.set_chunks({c: b"mine again"})
    assert inner.stats.requests["get"] == 1  # the kept shard was stale: one read
    fresh = open_store(inner, spec)
    assert await fresh.get_chunks([a, b, c]) == {a: b"mine", b: b"theirs", c: b"mine again"}
    # a condition on the version another writer made, which the kept shard does not have
    await other.set_chunks({d: b"theirs too"})
    now = await inner.head(f"{PREFIX}/1.shard")
    assert now is not None and now.version is not None
    await store.set(str(d), b"if current", if_match=now.version)
    assert await fresh.get_chunks([d]) == {d: b"if current"}


async def test_a_raw_write_of_a_shard_drops_the_copy_kept(spec: ShardingSpec) -> None:
    """A shard file written through the adapter by its own name (pass-through) replaces
    the copy the adapter kept of it: the next update reads, with no failed write."""
    inner = RecordingStore()
    store = await filled(inner, spec)
    a, b = ids_in(spec, 1)[:2]
    await store.set_chunks({a: b"kept"})
    raw = await inner.get(f"{PREFIX}/1.shard")
    assert raw is not None
    await store.set("1.shard", bytes(raw))  # the same bytes, another version
    inner.writes.clear()
    inner.stats.reset()
    await store.set_chunks({b: b"after"})
    assert dict(inner.stats.requests) == {"get": 1, "put": 1}
    assert await store.get_chunks([a, b]) == {a: b"kept", b: b"after"}


async def test_set_values_merges_into_shards(inner: Store, spec: ShardingSpec) -> None:
    """Precomputed shards have no fixed set of ids: set_values never replaces a shard."""
    store = await filled(inner, spec)
    await store.set_values({"3": b"three", "4": b"four", "info": b"{}"})
    got = await store.get_chunks(range(10))
    assert got == {i: ALL[i] for i in range(10)} | {3: b"three", 4: b"four"}
    assert await inner.get(f"{PREFIX}/info") == b"{}"


async def test_erase_chunks_by_id(inner: Store, spec: ShardingSpec) -> None:
    store = open_store(inner, spec)
    await store.set_chunks({1: b"a", 2: b"b"})
    same = next(i for i in range(3, 200) if store.shard_key(i) == store.shard_key(1))
    await store.set_chunks({same: b"c"})
    await store.erase_chunks([1, 12345])  # missing ids are fine
    assert await store.get_chunks([1, 2, same]) == {2: b"b", same: b"c"}
    await store.erase_chunks([same, 2])
    assert [k async for k in inner.list()] == []  # emptied shards are deleted


# --------------------------------------------------------------------------- staleness


async def test_rewritten_shard_never_yields_wrong_bytes(inner: Store, spec: ShardingSpec) -> None:
    reader = await filled(inner, spec)
    writer = open_store(inner, spec)  # its own cache
    a, b = ids_in(spec, 0, 3)[:2]
    assert await reader.get(str(a)) == ALL[a]
    # rewrite shard 0 with other contents and sizes, so every offset moves
    await writer.write_shards({i: content(i, salt=5) for i in ids_in(spec, 0)})
    inner.stats.reset()
    assert await reader.get(str(b)) == content(b, salt=5)
    assert inner.stats.requests["get"] == 4  # stale data read, shard index, minishard, data
    # a minishard index not cached yet is read conditionally too
    c = ids_in(spec, 0, 4)[0]
    await writer.set_chunks({c: b"changed"})
    inner.stats.reset()
    assert await reader.get(str(c)) == b"changed"
    assert inner.stats.requests["get"] == 4  # stale minishard read, shard index, minishard, data
    await writer.erase_chunks([*ids_in(spec, 0), c])
    assert not await inner.exists(f"{PREFIX}/0.shard")
    assert await reader.get(str(b)) is None
    assert await reader.get_chunks([a, b, c]) == {}


async def test_caller_condition_is_not_retried_as_stale(inner: Store, spec: ShardingSpec) -> None:
    store = await filled(inner, spec)
    with pytest.raises(ConflictError) as info:
        await store.get_object("10", if_match="stale-version")
    assert info.value.key == "10"
    assert inner.stats.requests["get"] == 2  # the indexes, no data read, no retry


# --------------------------------------------------------------------------- listing


async def test_listing_reads_indexes_once(inner: Store, spec: ShardingSpec) -> None:
    store = open_store(inner, spec)
    ids = [0, 1, 12, 123, 2**64 - 1, 555]
    await store.set_chunks({i: b"x" for i in ids})
    await inner.set(f"{PREFIX}/sub/3.shard", b"not a shard of this directory")
    assert await store.chunk_ids() == sorted(ids)
    assert sorted([k async for k in store.list()]) == sorted([*map(str, ids), "sub/3.shard"])
    # indexes came through the cache: listing again reads nothing but the listing
    inner.stats.reset()
    assert sorted([k async for k in store.list_prefix("12")]) == ["12", "123"]
    assert inner.stats.requests["get"] == 0


# --------------------------------------------------------------------------- bad shards


def u64le(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


ONE_SHARD = make_spec(minishard_bits=1, shard_bits=0, hash="identity")
SHARD_KEY = f"{PREFIX}/0.shard"


def shard_with(minishard_1_index: bytes, data: bytes) -> bytes:
    """A shard (1 minishard bit, no shard bits) with ``data`` then minishard 1's index."""
    index = encode_shard_index([[0, 0], [len(data), len(data) + len(minishard_1_index)]])
    return index + data + minishard_1_index


async def store_with_shard(blob: bytes, spec: ShardingSpec = ONE_SHARD) -> Uint64ShardedStore:
    inner = MemoryStore()
    await inner.set(SHARD_KEY, blob)
    return open_store(inner, spec)


BAD_SHARDS = {
    "minishard-index-length": shard_with(u64le(1, 0, 4)[:-1], b"abcd"),
    "chunk-past-shard-end": shard_with(u64le(1) + u64le(0) + u64le(100), b"abcd"),
    "minishard-index-past-end": encode_shard_index([[0, 0], [0, 480]]) + b"abcd",
    "start-after-end": encode_shard_index([[0, 0], [10, 5]]) + b"x" * 20,
    "duplicate-ids": shard_with(u64le(1, 0) + u64le(0, 0) + u64le(2, 2), b"abcd"),
    "truncated-shard-index": encode_shard_index([[0, 0], [0, 0]])[:20],
    "misplaced-id": shard_with(u64le(2) + u64le(0) + u64le(4), b"abcd"),  # 2 is even
}


@pytest.mark.parametrize("blob", list(BAD_SHARDS.values()), ids=list(BAD_SHARDS))
async def test_bad_shards_raise_typed_errors_naming_the_shard(blob: bytes) -> None:
    store = await store_with_shard(blob)
    errors = 0
    for attempt in (store.get("1"), store.get("3"), store.chunk_ids(), store.set("5", b"v")):
        try:
            await attempt
        except CorruptShardError as exc:
            assert SHARD_KEY in str(exc) and exc.key == SHARD_KEY
            errors += 1
    assert errors >= 1
    store.cache.clear()
    with pytest.raises(CorruptShardError, match=SHARD_KEY):
        await store.set_chunks({7: b"would drop the damaged chunks"})


async def test_corrupt_gzip_names_the_shard() -> None:
    spec = make_spec("gzip", minishard_bits=1, shard_bits=0, hash="identity")
    good = bytearray(build_shard({1: b"a" * 100, 3: b"b" * 100}, spec))
    start = chunk_range(bytes(good), spec, 3).start
    good[start + 12 : start + 20] = b"\xff" * 8  # inside the deflate stream
    store = await store_with_shard(bytes(good), spec)
    assert await store.get("1") == b"a" * 100
    with pytest.raises(CorruptShardError, match=SHARD_KEY):
        await store.get("3")
    # a corrupt gzip minishard index
    index = encode_shard_index([[0, 0], [0, 30]])
    store = await store_with_shard(index + b"\x1f\x8b" + b"\x00" * 28, spec)
    with pytest.raises(CorruptShardError, match=SHARD_KEY):
        await store.get("1")


async def test_duplicate_ids_in_a_batch_are_fine(inner: Store, spec: ShardingSpec) -> None:
    store = await filled(inner, spec)
    assert await store.get_chunks([5, 5, 6]) == {5: ALL[5], 6: ALL[6]}


async def test_int_api_validates_ids() -> None:
    store = open_store(MemoryStore(), make_spec())
    for bad in ([-1], [2**64], ["7"], [1.5]):
        with pytest.raises(ValueError):
            await store.get_chunks(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.set_chunks({-3: b"x"})
    with pytest.raises(ValueError):
        await store.erase_chunks([2**64])


def mutated_shard(data: st.DataObject) -> bytes:
    specs = [ONE_SHARD, make_spec("gzip", minishard_bits=1, shard_bits=0)]
    spec = data.draw(st.sampled_from(specs))
    chunks = data.draw(st.dictionaries(st.integers(0, 40), st.binary(max_size=20), max_size=8))
    blob = bytearray(build_shard(chunks, spec))
    for _ in range(data.draw(st.integers(1, 4))):
        if not blob:
            break
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    return bytes(blob)


async def exercise(blob: bytes, spec: ShardingSpec) -> None:
    store = await store_with_shard(blob, spec)
    for attempt in (
        store.get_partial_values([(str(i), None) for i in range(0, 41, 3)] + [("1", Range(1, 3))]),
        store.chunk_ids(),
        store.head("2"),
        store.set_chunks({1: b"x"}),
    ):
        with contextlib.suppress(AsyncShardError):
            await attempt


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.sampled_from(ENCODINGS))
def test_random_bytes_as_a_shard_raise_only_asyncshard_errors(blob: bytes, enc: str) -> None:
    asyncio.run(exercise(blob, make_spec(enc, minishard_bits=1, shard_bits=0, hash="identity")))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_shards_raise_only_asyncshard_errors(data: st.DataObject) -> None:
    blob = mutated_shard(data)
    for spec in (ONE_SHARD, make_spec("gzip", minishard_bits=1, shard_bits=0)):
        asyncio.run(exercise(blob, spec))


# --------------------------------------------------------------------------- volumes

VOLUME_SHARDING = make_spec("gzip", minishard_bits=1, shard_bits=1, preshift_bits=1)
INFO: dict[str, Any] = {
    "@type": "neuroglancer_multiscale_volume",
    "type": "image",
    "data_type": "uint8",
    "num_channels": 1,
    "extra": {"kept": True},
    "scales": [
        {
            "key": "8_8_8",
            "size": [10, 7, 5],
            "voxel_offset": [-3, 0, 2],
            "chunk_sizes": [[4, 4, 4]],
            "resolution": [8, 8, 8],
            "encoding": "raw",
            "sharding": VOLUME_SHARDING.to_json(),
        },
        {
            "key": "16_16_16",
            "size": [5, 4, 3],
            "chunk_sizes": [[4, 4, 4]],
            "resolution": [16, 16, 16],
            "encoding": "raw",
        },
    ],
}


async def volume_store() -> MemoryStore:
    inner = MemoryStore()
    await inner.set("data/vol/info", json.dumps(INFO).encode())
    return inner


async def test_sharded_scale_by_chunk_name() -> None:
    inner = await volume_store()
    volume = await PrecomputedVolume.open(inner, "data/vol", cache=LoadingCache())
    assert volume.sharded_scale_keys == ["8_8_8"]
    scale = volume.scale("8_8_8")
    assert scale.store.prefix == "data/vol/8_8_8"
    with pytest.raises(InvalidMetadataError, match="not sharded"):
        volume.scale("16_16_16")
    with pytest.raises(KeyError):
        volume.scale("nope")
    grid = scale.scale.grid_shape
    assert grid == (3, 2, 2)
    names = [
        scale.scale.chunk_name((x, y, z))
        for x in range(grid[0])
        for y in range(grid[1])
        for z in range(grid[2])
    ]
    assert "-3-1_0-4_2-6" in names and "5-7_4-7_6-7" in names  # offset, clipped edges
    chunks = {name: name.encode() * 3 for name in names}
    await scale.set_chunks(chunks, replace_shards=True)
    assert await scale.list_chunk_names() == sorted(names)
    assert await scale.get_chunk("5-7_4-7_6-7") == b"5-7_4-7_6-7" * 3
    assert await scale.get_chunks(names[:4]) == {n: chunks[n] for n in names[:4]}
    for name in names:
        chunk_id = scale.chunk_id(name)
        assert scale.chunk_name(chunk_id) == name
        assert await scale.store.get_chunk(chunk_id) == chunks[name]
    with pytest.raises(KeyError):
        scale.chunk_id("0-4_0-4_0-4")  # not aligned with the voxel offset
    await scale.set_chunks({names[0]: b"changed"})  # merges
    await scale.erase_chunks([names[1]])
    assert await scale.get_chunk(names[0]) == b"changed"
    assert await scale.get_chunk(names[1]) is None
    assert await scale.get_chunk(names[2]) == chunks[names[2]]
    again = await ShardedScale.open(inner, "8_8_8", path="data/vol", cache=LoadingCache())
    assert await again.get_chunk(names[2]) == chunks[names[2]]
    assert scale.chunk_names([scale.chunk_id(names[3]), 2**40]) == [names[3], None]


async def test_unsharded_info() -> None:
    doc = unsharded_info(INFO)
    assert "sharding" in INFO["scales"][0]  # the input is not modified
    assert all("sharding" not in s for s in doc["scales"])
    assert doc["extra"] == {"kept": True}
    assert doc["scales"][0]["chunk_sizes"] == [[4, 4, 4]]


async def test_unsharded_view() -> None:
    """What the view adds for volumes (its Store behaviour is in the conformance suite):
    the info without sharding, chunks by name, shard files hidden, unsharded scales and
    other files passed through, and the bounded listing of a sharded scale's folder."""
    inner = await volume_store()
    volume = await PrecomputedVolume.open(inner, "data/vol", cache=LoadingCache())
    await volume.scale("8_8_8").set_chunks({"-3-1_0-4_2-6": b"first", "5-7_4-7_6-7": b"edge"})
    await inner.set("data/vol/16_16_16/0-4_0-4_0-3", b"unsharded chunk")
    await inner.set("data/vol/8_8_8/provenance", b"p")
    view = UnshardedView(inner, list_chunks=True)
    v = "data/vol/"
    assert json.loads(bytes(await view.get(v + "info") or b"")) == unsharded_info(INFO)
    assert await view.get(v + "8_8_8/-3-1_0-4_2-6") == b"first"
    assert await view.get(v + "8_8_8/1-5_0-4_2-6") is None  # a chunk never written
    assert await view.get(v + "8_8_8/0.shard") is None  # shard files are hidden
    assert await view.get(v + "8_8_8/provenance") == b"p"
    assert await view.get(v + "16_16_16/0-4_0-4_0-3") == b"unsharded chunk"
    assert await view.list_dir(v + "8_8_8") == (
        [v + "8_8_8/-3-1_0-4_2-6", v + "8_8_8/5-7_4-7_6-7", v + "8_8_8/provenance"],
        [],
    )
    bounded = UnshardedView(inner)  # the server's listing: no chunk enumeration
    assert await bounded.list_dir(v + "8_8_8") == ([v + "8_8_8/provenance"], [])
    assert await bounded.has_folder(v + "8_8_8/")


def test_vectorised_hashing_matches_scalar() -> None:
    spec = make_spec(preshift_bits=3)
    ids = np.random.default_rng(1).integers(0, 2**63, size=500, dtype=np.uint64)
    shards, minishards = spec.shard_and_minishard(ids)
    for i, s, m in zip(ids.tolist(), shards.tolist(), minishards.tolist(), strict=True):
        assert spec.shard_and_minishard_of(i) == (s, m)


async def test_every_chunk_of_a_volume_shard_costs_one_request_either_way() -> None:
    """For a volume scale the chunks of each shard are known (every grid position that
    hashes to it), so asking all of them reads the uncached shard whole (1 request
    instead of 3), and writing all of them builds the shard without reading it."""
    inner = await volume_store()
    volume = await PrecomputedVolume.open(inner, "data/vol", cache=LoadingCache())
    scale = volume.scale("8_8_8")
    named = scale_store(
        inner, volume.info, scale.scale, path="data/vol", named=True, cache=LoadingCache()
    )
    grid = scale.scale.grid_shape
    names = [
        scale.scale.chunk_name((x, y, z))
        for x in range(grid[0])
        for y in range(grid[1])
        for z in range(grid[2])
    ]
    by_shard: dict[str, list[str]] = {}
    for name in names:
        by_shard.setdefault(scale.store.shard_key(scale.chunk_id(name)), []).append(name)
    members = max(by_shard.values(), key=len)
    assert len(by_shard) == 2 and len(members) > 1
    inner.stats.reset()
    await named.set_values({n: n.encode() for n in members})
    assert (inner.stats.requests["get"], inner.stats.requests["put"]) == (0, 1)
    named.cache.clear()
    inner.stats.reset()
    values = await named.get_partial_values([(n, None) for n in members])
    assert [bytes(v or b"") for v in values] == [n.encode() for n in members]
    assert inner.stats.requests["get"] == 1, "the uncached shard, read whole"
