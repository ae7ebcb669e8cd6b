"""The shard-index cache: byte-charged LRU, single-flight, missing-object TTL."""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
from collections.abc import Awaitable, Callable

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.cache import ENTRY_OVERHEAD, CacheEntry, LoadingCache, charge_of, default_cache
from asyncshard.formats.zarr3.grid import ShardingLayout
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.formats.zarr3.shard import IndexLayout, encode_shard
from asyncshard.sharding.zarr import ZarrShardedStore


def loader(
    calls: list[str], key: str, nbytes: int = 100, delay: float = 0.01
) -> Callable[[], Awaitable[CacheEntry]]:
    async def load() -> CacheEntry:
        calls.append(key)
        await asyncio.sleep(delay)
        return LoadingCache.make_entry(f"index of {key}", "v1", nbytes)

    return load


async def test_concurrent_misses_make_one_load() -> None:
    cache = LoadingCache()
    calls: list[str] = []
    entries = await asyncio.gather(*(cache.get("s", loader(calls, "s")) for _ in range(64)))
    assert calls == ["s"]
    assert {e.value for e in entries} == {"index of s"}
    assert (cache.stats.misses, cache.stats.joined) == (1, 63)
    await cache.get("s", loader(calls, "s"))
    assert calls == ["s"] and cache.stats.hits == 1


async def test_lru_charged_by_bytes() -> None:
    each = charge_of("index of a", "v1", 300)  # the payload, the objects, the overhead
    assert each == 300 + sys.getsizeof("index of a") + sys.getsizeof("v1") + ENTRY_OVERHEAD
    cache = LoadingCache(max_bytes=2 * each)
    calls: list[str] = []
    for key in "abc":
        await cache.get(key, loader(calls, key, nbytes=300, delay=0))
    assert len(cache) == 2 and cache.current_bytes == 2 * each
    assert cache.peek("a") is None and cache.peek("c") is not None
    await cache.get("huge", loader(calls, "huge", nbytes=5000, delay=0))
    assert cache.peek("huge") is None  # larger than the whole budget: returned, not kept
    assert cache.peek("c") is not None


async def test_entries_age_until_touched() -> None:
    cache = LoadingCache()
    calls: list[str] = []

    async def load_missing() -> CacheEntry:
        calls.append("m")
        return LoadingCache.make_entry(None, None, 0)

    first = await cache.get("m", load_missing)
    assert first.missing and (await cache.get("m", load_missing)) is first
    assert calls == ["m"]  # the cache never expires entries itself
    await asyncio.sleep(0.02)
    cache.touch("m", first)
    touched = cache.peek("m")
    assert touched is not None and touched.loaded_at > first.loaded_at
    cache.touch("m", first)  # no longer the cached entry: nothing happens
    assert cache.peek("m") is touched


async def test_failed_load_reaches_every_waiter_and_is_not_cached() -> None:
    cache = LoadingCache()
    attempts = 0

    async def boom() -> CacheEntry:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0.01)
        raise OSError("backend down")

    results = await asyncio.gather(
        *(cache.get("k", boom) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, OSError) for r in results) and attempts == 1
    with pytest.raises(OSError):
        await cache.get("k", boom)
    assert attempts == 2


async def test_invalidate_and_default_cache_is_shared() -> None:
    cache = LoadingCache()
    cache.put("k", "value", "v1", 10)
    assert cache.peek("k") is not None
    cache.invalidate("k")
    assert cache.peek("k") is None
    assert default_cache() is default_cache()


async def test_a_load_overtaken_by_put_or_invalidate_does_not_store_its_result() -> None:
    cache = LoadingCache()
    release = asyncio.Event()

    async def slow_old() -> CacheEntry:
        await release.wait()
        return LoadingCache.make_entry("old index", "v1", 10)

    loading = asyncio.ensure_future(cache.get("k", slow_old))
    await asyncio.sleep(0)
    cache.put("k", "new index", "v2", 10)  # e.g. a writer remembering what it wrote
    release.set()
    assert (await loading).value == "old index"  # the waiter gets what it loaded...
    entry = cache.peek("k")
    assert entry is not None and entry.value == "new index"  # ...but the newer entry stays

    loading = asyncio.ensure_future(cache.get("j", slow_old))
    await asyncio.sleep(0)
    cache.invalidate("j")
    await loading
    assert cache.peek("j") is None


async def test_no_caller_joins_a_load_that_was_overtaken() -> None:
    """A load that started before a put or an invalidation may answer with what that
    change replaced: a caller arriving after the change loads anew."""
    cache = LoadingCache()
    release = asyncio.Event()

    async def slow_old() -> CacheEntry:
        await release.wait()
        return LoadingCache.make_entry("old index", "v1", 10)

    async def new() -> CacheEntry:
        return LoadingCache.make_entry("new index", "v2", 10)

    first = asyncio.ensure_future(cache.get("k", slow_old))
    await asyncio.sleep(0)
    joined = asyncio.ensure_future(cache.get("k", new))  # before any change: joins
    await asyncio.sleep(0)
    cache.invalidate("k")
    after = asyncio.ensure_future(cache.get("k", new))
    while cache.stats.misses + cache.stats.joined < 3:  # until it asked
        await asyncio.sleep(0)
    release.set()
    assert (await after).value == "new index"
    assert [(await first).value, (await joined).value] == ["old index", "old index"]
    assert (cache.stats.misses, cache.stats.joined) == (2, 1)
    entry = cache.peek("k")
    assert entry is not None and entry.value == "new index"


def test_offered_answers_never_replace_what_the_cache_learned_since() -> None:
    """``offer``: an answer whose request started before a put or an invalidation of its
    key is dropped; a write's answer then drops the key (which is newer is unknown)."""
    cache = LoadingCache()
    read = cache.ticket("k")
    cache.put("k", "written", "v2", 10)
    assert not cache.offer(read, "read", "v1", 10)
    assert cache.peek("k").value == "written"  # type: ignore[union-attr]

    write = cache.ticket("k")
    cache.put("k", "read meanwhile", "v1", 10)
    assert not cache.offer(write, "written", "v3", 10, written=True)
    assert cache.peek("k") is None

    for change in (lambda: cache.invalidate("k"), cache.clear):
        late = cache.ticket("k")
        change()
        assert not cache.offer(late, "read", "v1", 10) and cache.peek("k") is None
    in_ns = cache.ticket(("ns", "k"))
    cache.invalidate_namespace("ns")
    assert not cache.offer(in_ns, "read", "v1", 10)

    alone = cache.ticket("k")
    assert cache.offer(alone, "read", "v4", 10) and cache.peek("k").value == "read"  # type: ignore[union-attr]
    cache.release(alone)  # released already: a no-op


def test_generation_changes_when_an_entry_leaves_or_changes() -> None:
    """Adding entries keeps the generation; replacing, evicting, dropping and clearing
    change it; confirming (``touch``) and dropping a missing key do not."""
    small, big = charge_of("A", "v1", 100), charge_of("X", "v1", 450)
    cache = LoadingCache(max_bytes=2 * small + big - 1)
    g = cache.generation
    a = cache.put("a", "A", "v1", 100)
    cache.put("b", "B", "v1", 100)
    assert cache.generation == g, "added"
    cache.touch("a", a)
    cache.invalidate("missing")
    assert cache.generation == g, "confirmed, or nothing dropped"
    cache.put("a", "A2", "v2", 100)
    assert cache.generation > g, "replaced"
    g = cache.generation
    cache.put("big", "X", "v1", 450)  # beside two small ones: "b" (least recent) leaves
    assert cache.peek("b") is None and cache.peek("a") is not None
    assert cache.generation > g, "evicted"
    g = cache.generation
    cache.invalidate("a")
    assert cache.generation > g, "dropped"
    g = cache.generation
    cache.put(("ns", 1), "N", "v1", 10)
    cache.invalidate_namespace("ns")
    assert cache.generation > g
    g = cache.generation
    cache.clear()
    assert cache.generation > g


@pytest.mark.parametrize("cps", [(4, 4), (8, 8), (32, 32)])
async def test_index_entries_are_charged_what_they_hold(cps: tuple[int, int]) -> None:
    """A cached shard index is charged within 15 % of the memory it holds (tracemalloc):
    small indexes are mostly objects around the table, not the table."""
    index = IndexLayout(cps)
    store = MemoryStore()
    n = 600
    for i in range(n):
        await store.set(f"arr/c/{i}/0", encode_shard({(0, 0): b"x" * 8}, index))
    shape = (n * cps[0] * 2, cps[1] * 2)
    shard_shape = (cps[0] * 2, cps[1] * 2)
    layout = ShardingLayout(shape, shard_shape, (2, 2), cps, index, ChunkKeyEncoding(prefix="arr/"))
    cache = LoadingCache(1 << 40)
    sharded = ZarrShardedStore(store, layout, cache=cache)
    await sharded.get("arr/c/0/0")  # first use: the store's own objects
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        charged = cache.current_bytes
        for i in range(1, n):
            await sharded.get(f"arr/c/{i * cps[0]}/0")
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cache) == n
    ratio = (after - before) / (cache.current_bytes - charged)
    assert 0.85 < ratio < 1.15, ratio
