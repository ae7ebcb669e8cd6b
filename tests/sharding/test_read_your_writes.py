"""Read-your-writes: once a write call returns, the same store never reads anything older.

Answers that were on their way while the write ran (a whole-shard read, an index load,
another write of the shard) are held back by a store that delays them after the wrapped
MemoryStore answered, so each race is played in one order, deterministically.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from asyncshard.backends import MemoryStore
from asyncshard.cache import LoadingCache
from asyncshard.ranges import ByteRange
from asyncshard.sharding import ZarrShardedStore
from asyncshard.store import BytesLike, GetResult
from tests.zarr.helpers import array_doc

SHARD = "arr/c/0"  # chunks 0 and 1 of the array below


class Delayed(MemoryStore):
    """A MemoryStore whose answers can be held after it produced them: ``hold_get`` and
    ``hold_put`` decide per request whether to wait for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_get: Callable[[str, ByteRange | None], bool] = lambda _k, _r: False
        self.hold_put: Callable[[str], bool] = lambda _k: False
        self.held = asyncio.Event()  # an answer is being held
        self.release = asyncio.Event()

    async def _wait(self) -> None:
        self.held.set()
        await self.release.wait()

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        result = await super()._get(key, byte_range, if_match)
        if self.hold_get(key, byte_range):
            self.hold_get = lambda _k, _r: False  # once
            await self._wait()
        return result

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        version = await super()._set(key, data, if_match, if_absent)
        if self.hold_put(key):
            self.hold_put = lambda _k: False
            await self._wait()
        return version


async def open_array(
    inner: MemoryStore, cache: LoadingCache | None = None, **options: object
) -> ZarrShardedStore:
    """A 1-d array of 8 chunks, 2 per shard (chunks 0 and 1 share ``arr/c/0``)."""
    await inner.set("arr/zarr.json", json.dumps(array_doc([8], [2], [1])).encode())
    return await ZarrShardedStore.open(
        inner, "arr", cache=cache if cache is not None else LoadingCache(), **options
    )


async def started(task: Awaitable[object], inner: Delayed) -> asyncio.Task[object]:
    """``task`` running until the wrapped store holds its answer."""
    running = asyncio.ensure_future(task)
    await asyncio.wait_for(inner.held.wait(), 10)
    return running


async def test_a_whole_shard_read_answered_before_a_write_never_hides_it() -> None:
    """A read of the whole shard, answered before a write landed but delivered after the
    write returned, must not leave its (older) index in place of the written one."""
    inner = Delayed()
    store = await open_array(inner)
    await store.set("arr/c/0", b"a")
    store.forget_cached()
    inner.hold_get = lambda key, rng: key == SHARD and rng is None
    reading = await started(store.get_partial_values([("arr/c/0", None), ("arr/c/1", None)]), inner)
    await store.set("arr/c/1", b"b")  # acknowledged
    inner.release.set()
    assert await reading == [b"a", None]  # the reader's own answer: before the write
    assert await store.get("arr/c/1") == b"b"
    assert await store.get("arr/c/0") == b"a"


async def test_a_data_cache_never_serves_a_value_older_than_a_returned_write() -> None:
    """The same race with a data cache: the late whole-shard read cached the chunk's
    older bytes under the older shard version; they must not be served after the write."""
    inner = Delayed()
    store = await open_array(inner, data_cache=LoadingCache())
    await store.set_values({"arr/c/0": b"a", "arr/c/1": b"old"})
    store.forget_cached()
    inner.hold_get = lambda key, rng: key == SHARD and rng is None
    reading = await started(store.get_partial_values([("arr/c/0", None), ("arr/c/1", None)]), inner)
    await store.set("arr/c/1", b"new")
    inner.release.set()
    assert await reading == [b"a", b"old"]
    assert await store.get("arr/c/1") == b"new"


async def test_a_write_acknowledged_late_never_hides_a_later_one() -> None:
    """Two writes of one shard from one store: the first lands, the second reads it and
    lands on top and returns, then the first's answer arrives. The second's caller must
    still read its chunk, and so must the first's."""
    inner = Delayed()
    store = await open_array(inner)
    await store.set("arr/c/0", b"a")
    inner.hold_put = lambda key: key == SHARD
    first = await started(store.set("arr/c/0", b"a2"), inner)
    await store.set("arr/c/1", b"b")  # reads the shard the first write left, then writes
    inner.release.set()
    await first
    assert await store.get("arr/c/1") == b"b"
    assert await store.get("arr/c/0") == b"a2"


async def test_no_read_joins_an_index_load_a_write_overtook() -> None:
    """An index load that started before a write (and answers "no such chunk") is not
    handed to a read that starts after the write returned."""
    inner = Delayed()
    cache = LoadingCache()
    store = await open_array(inner, cache=cache)
    await store.set("arr/c/0", b"a")
    store.forget_cached()
    inner.hold_get = lambda key, rng: key == SHARD and rng is not None  # the index read
    loading = await started(store.get("arr/c/1"), inner)
    await store.erase_values(["arr/c/0"])  # the shard is gone: nothing cached for it
    await store.set("arr/c/1", b"b")
    store.forget_cached()  # e.g. another read found the shard changed
    asked = cache.stats.misses + cache.stats.joined
    reading = asyncio.ensure_future(store.get("arr/c/1"))
    while cache.stats.misses + cache.stats.joined == asked:  # until it asked the cache
        await asyncio.sleep(0)
    inner.release.set()
    assert await reading == b"b"
    assert await loading is None  # its own answer: from before the writes
