"""What a sharded store promises when a call returns or raises, whatever the format.

Faults are injected at the wrapped store's boundary (a MemoryStore with hooks), so that
the races are deterministic; tests/sharding/test_soak.py runs the same guarantees
against a real server behind the fault-injecting proxy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.cache import LoadingCache
from asyncshard.errors import ConflictError, PartialWriteError, StoreConnectionError
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.ranges import ByteRange, Range
from asyncshard.sharding import Uint64ShardedStore, ZarrShardedStore
from asyncshard.sharding.engine import STALE_RETRIES, ShardedAdapter
from asyncshard.store import BytesLike, GetResult
from tests.zarr.helpers import array_doc


class Hooked(MemoryStore):
    """A MemoryStore that runs a hook before each primitive (to delay, fail or race)."""

    def __init__(self) -> None:
        super().__init__()
        self.before_put: Callable[[str], Awaitable[None]] | None = None
        self.before_get: Callable[[str, ByteRange | None], Awaitable[None]] | None = None

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        if self.before_put is not None:
            await self.before_put(key)
        return await super()._set(key, data, if_match, if_absent)

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        if self.before_get is not None:
            await self.before_get(key, byte_range)
        return await super()._get(key, byte_range, if_match)


async def zarr_store(inner: MemoryStore) -> ZarrShardedStore:
    """A 1-d array of 8 chunks, 2 per shard: chunk ``arr/c/i`` lives in shard ``i // 2``."""
    await inner.set("arr/zarr.json", json.dumps(array_doc([8], [2], [1])).encode())
    return await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())


def precomputed_store(inner: MemoryStore) -> Uint64ShardedStore:
    spec = ShardingSpec(0, "identity", minishard_bits=0, shard_bits=2)  # id % 4 = shard
    return Uint64ShardedStore(inner, spec, cache=LoadingCache())


async def both(inner: MemoryStore, fmt: str) -> tuple[ShardedAdapter, str, str, str]:
    """A store and three chunk keys: two in one shard, one in another."""
    if fmt == "zarr":
        return await zarr_store(inner), "arr/c/0", "arr/c/1", "arr/c/2"
    return precomputed_store(inner), "0", "4", "1"


FORMATS = ["zarr", "precomputed"]


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_failed_multi_shard_write_leaves_nothing_in_flight(fmt: str) -> None:
    """One shard slow, one failing: the call raises only once the slow one has landed,
    naming what was written, so a newer acknowledged write is never overwritten later
    by a sibling of a call that already failed."""
    inner = Hooked()
    store, slow_key, _, failing_key = await both(inner, fmt)
    slow_shard = store.format.locate(slow_key).shard_key  # type: ignore[union-attr]
    failing_shard = store.format.locate(failing_key).shard_key  # type: ignore[union-attr]

    async def hook(key: str) -> None:
        if key == failing_shard:
            raise StoreConnectionError("injected: the connection broke")
        if key == slow_shard:
            await asyncio.sleep(0.2)

    inner.before_put = hook
    with pytest.raises(PartialWriteError) as raised:
        await store.set_values({slow_key: b"old", failing_key: b"lost"})
    assert raised.value.written == [slow_key]
    assert list(raised.value.failed) == [failing_key]
    assert isinstance(raised.value.failed[failing_key], StoreConnectionError)
    assert await store.get(slow_key) == b"old", "it landed before the call raised"
    inner.before_put = None
    await store.set(slow_key, b"new")  # acknowledged
    await asyncio.sleep(0.3)  # anything the failed call left running would land now
    assert await store.get(slow_key) == b"new"
    assert await store.get(failing_key) is None


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_cancelled_write_waits_for_what_it_started(fmt: str) -> None:
    inner = Hooked()
    store, key, _, other = await both(inner, fmt)

    async def slow(_key: str) -> None:
        await asyncio.sleep(0.1)

    inner.before_put = slow
    task = asyncio.ensure_future(store.set_values({key: b"a", other: b"b"}))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    inner.before_put = None
    landed = {k: await store.get(k) for k in (key, other)}
    await store.set(key, b"newer")
    await asyncio.sleep(0.2)
    assert await store.get(key) == b"newer", "nothing of the cancelled call lands later"
    assert landed == {key: b"a", other: b"b"}, "the writes in flight finished before"


@pytest.mark.parametrize("fmt", FORMATS)
async def test_concurrent_sets_in_one_shard_make_one_shard_write(fmt: str) -> None:
    inner = Hooked()
    store, a, b, _ = await both(inner, fmt)
    inner.stats.reset()
    versions = await asyncio.gather(store.set(a, b"A"), store.set(b, b"B"))
    assert versions[0] == versions[1] is not None
    assert inner.stats.requests["put"] == 1
    assert (await store.get(a), await store.get(b)) == (b"A", b"B")


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_failed_condition_in_a_merged_write_fails_only_its_chunk(fmt: str) -> None:
    inner = Hooked()
    store, a, b, _ = await both(inner, fmt)
    await store.set(a, b"first")
    results = await asyncio.gather(
        store.set(a, b"second", if_absent=True),  # exists: fails
        store.set(b, b"written"),
        return_exceptions=True,
    )
    assert isinstance(results[0], ConflictError)
    assert isinstance(results[1], str)
    assert (await store.get(a), await store.get(b)) == (b"first", b"written")


@pytest.mark.parametrize("fmt", FORMATS)
async def test_plain_reads_never_see_a_conflict_while_the_shard_keeps_changing(
    fmt: str,
) -> None:
    """Another writer rewrites the shard between every index read and data read: the
    read retries with fresh indexes, then reads the shard whole (one consistent
    snapshot) and returns the right bytes; it never raises ConflictError."""
    inner = Hooked()
    store, key, neighbour, _ = await both(inner, fmt)
    await store.set_values({key: b"value", neighbour: b"n0"})
    shard = store.format.locate(key).shard_key  # type: ignore[union-attr]
    writer = await zarr_store(inner) if fmt == "zarr" else precomputed_store(inner)
    rewrites = 0

    async def race(k: str, rng: ByteRange | None) -> None:
        nonlocal rewrites
        if k == shard and rng is not None and rewrites < 10:  # a ranged read of the shard
            rewrites += 1
            await writer.set(neighbour, f"n{rewrites}".encode())

    store.cache.clear()
    inner.before_get = race
    assert await store.get(key) == b"value"
    assert rewrites > STALE_RETRIES, "the shard changed under every ranged read"
    inner.before_get = None
    assert await store.get(neighbour) == f"n{rewrites}".encode()


async def reader_and_writer(
    fmt: str, recheck_after: float
) -> tuple[ShardedAdapter, ShardedAdapter, MemoryStore, str, str]:
    """Two stores over one inner store with separate caches (two processes' views)."""
    inner = Hooked()
    writer, key, neighbour, _ = await both(inner, fmt)
    await writer.set(neighbour, b"n")
    if fmt == "zarr":
        reader: ShardedAdapter = await ZarrShardedStore.open(
            inner, "arr", cache=LoadingCache(), recheck_after=recheck_after
        )
    else:
        spec = ShardingSpec(0, "identity", minishard_bits=0, shard_bits=2)
        reader = Uint64ShardedStore(inner, spec, cache=LoadingCache(), recheck_after=recheck_after)
    return reader, writer, inner, key, neighbour


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_long_lived_reader_sees_new_chunks_within_recheck_after(fmt: str) -> None:
    reader, writer, inner, key, neighbour = await reader_and_writer(fmt, 0.2)
    assert await reader.get(key) is None  # cached: the shard holds no such chunk
    await writer.set(key, b"added elsewhere")
    inner.stats.reset()
    for _ in range(5):  # within the window: the cached answer, at no cost
        assert await reader.get(key) is None
    assert inner.stats.total_requests == 0
    await asyncio.sleep(0.25)
    values = await asyncio.gather(*(reader.get(key) for _ in range(8)))
    assert values == [b"added elsewhere"] * 8
    assert inner.stats.requests["head"] == 1, "one revalidation per shard per window"
    assert await reader.get(neighbour) == b"n"


@pytest.mark.parametrize("fmt", FORMATS)
async def test_recheck_after_zero_means_always(fmt: str) -> None:
    reader, writer, _, key, _ = await reader_and_writer(fmt, 0)
    assert await reader.get(key) is None
    await writer.set(key, b"seen at once")
    assert await reader.get(key) == b"seen at once"
    assert await reader.head(key) is not None
    await writer.erase_values([key])
    assert await reader.head(key) is None, "head answers are revalidated too"


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_unchanged_shard_costs_one_head_per_window(fmt: str) -> None:
    reader, _, inner, key, _ = await reader_and_writer(fmt, 0.1)
    assert await reader.get(key) is None
    inner.stats.reset()
    for _ in range(3):
        await asyncio.sleep(0.12)
        assert await reader.get(key) is None
    assert (inner.stats.requests["head"], inner.stats.requests["get"]) == (3, 0)


async def cached_pair(
    fmt: str, recheck_after: float = 1.0
) -> tuple[ShardedAdapter, ShardedAdapter, Hooked, str]:
    """A reader with a data cache and a writer (separate caches) over one inner store."""
    inner = Hooked()
    writer, key, _, _ = await both(inner, fmt)
    options = {
        "cache": LoadingCache(),
        "recheck_after": recheck_after,
        "data_cache": LoadingCache(),
    }
    if fmt == "zarr":
        reader: ShardedAdapter = await ZarrShardedStore.open(inner, "arr", **options)
    else:
        spec = ShardingSpec(0, "identity", minishard_bits=0, shard_bits=2, data_encoding="gzip")
        writer = Uint64ShardedStore(inner, spec, cache=LoadingCache())
        reader = Uint64ShardedStore(inner, spec, **options)  # type: ignore[arg-type]
    return reader, writer, inner, key


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_warm_data_cache_costs_no_request(fmt: str) -> None:
    reader, writer, inner, key = await cached_pair(fmt)
    await writer.set(key, b"0123456789")
    assert await reader.get(key) == b"0123456789"
    inner.stats.reset()
    assert await reader.get(key) == b"0123456789"
    assert await reader.get(key, Range(2, 5)) == b"234"
    assert await reader.get_partial_values([(key, None), (key, Range(0, 1))]) == [
        b"0123456789",
        b"0",
    ]
    assert inner.stats.total_requests == 0


@pytest.mark.parametrize("fmt", FORMATS)
async def test_single_reads_with_a_data_cache_take_the_lean_path(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a data cache (``serve --unshard``) and encoded chunks, a single warm read is
    one range read of the chunk (or none once cached), never a batch; sequential reads
    that finish within their tick each take it."""
    reader, writer, inner, key = await cached_pair(fmt)
    other = "arr/c/1" if fmt == "zarr" else "4"  # the same shard as ``key``
    await writer.set(key, b"first")
    await writer.set(other, b"second")
    assert await reader.get(key) == b"first"  # cold: the index is cached now
    await asyncio.sleep(0)

    async def no_batch(*args: object) -> None:
        raise AssertionError("the batch path ran")

    monkeypatch.setattr(reader.reads, "read_shard", no_batch)
    inner.stats.reset()
    assert await reader.get(other) == b"second"
    assert inner.stats.requests["get"] == 1, "one range read of the chunk"
    inner.stats.reset()
    assert await reader.get(other) == b"second"
    assert await reader.get(key) == b"first"
    assert inner.stats.requests["get"] == 0, "the cached index and data answer"


@pytest.mark.parametrize("fmt", FORMATS)
async def test_the_data_cache_never_serves_an_older_shard_version(fmt: str) -> None:
    """Entries are keyed by the shard's version: a rewrite through the store is seen at
    once; one by another process as soon as the index is rechecked (always, here)."""
    reader, writer, _, key = await cached_pair(fmt, recheck_after=0)
    await writer.set(key, b"version 1")
    assert await reader.get(key) == b"version 1"
    await writer.set(key, b"version 2")  # another process
    assert await reader.get(key) == b"version 2"
    await reader.set(key, b"version 3")  # through the reader itself
    assert await reader.get(key) == b"version 3"
    await writer.erase_values([key])
    assert await reader.get(key) is None


async def test_an_encoded_chunk_read_in_pieces_is_decoded_once() -> None:
    """Streaming a gzip chunk in pieces (as the server does) fetches and decodes it once."""
    reader, writer, inner, key = await cached_pair("precomputed")
    payload = bytes(range(256)) * 64
    await writer.set(key, payload)
    inner.stats.reset()
    pieces = [await reader.get(key, Range(i, i + 4096)) for i in range(0, len(payload), 4096)]
    assert b"".join(bytes(p or b"") for p in pieces) == payload
    assert inner.stats.requests["get"] == 3, "shard index, minishard index, chunk: once"
    assert reader.data_cache is not None and len(reader.data_cache) == 1
