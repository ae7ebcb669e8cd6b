"""The caches of sharded stores: a byte-charged LRU with single-flight loading.

Sharded stores keep decoded indexes in one (Zarr shard indexes, precomputed shard and
minishard indexes), shared by every sharded store of the process unless a store is
given its own; a store given a ``data_cache`` keeps chunk bytes in another. Properties:

* **Charged by bytes**: each entry costs its ``nbytes``; the least recently used entries
  leave when the budget is exceeded.
* **Single-flight**: concurrent misses for one key make one load; the others await it.
* **Versioned**: an entry carries the version of the object it was decoded from, so a
  reader can condition its data reads on it and drop the entry when it is stale.
* **Aged**: an entry knows when it was loaded (or last confirmed with :meth:`touch`), so
  its user can decide when to revalidate it; the cache itself never expires entries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
_ENTRY_OVERHEAD = 200  # bytes charged per entry beyond its payload


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A decoded index (``value``; ``None`` when the object is missing) and its version."""

    value: Any
    version: str | None
    nbytes: int
    loaded_at: float

    @property
    def missing(self) -> bool:
        """Whether the entry records that the object does not exist."""
        return self.value is None


def _entry_size(entry: CacheEntry) -> int:
    return entry.nbytes + _ENTRY_OVERHEAD


@dataclass(slots=True)
class CacheStats:
    """Hits, misses (loads started) and loads joined by concurrent callers."""

    hits: int = 0
    misses: int = 0
    joined: int = 0


class LoadingCache:
    """Byte-charged LRU with single-flight loads: the shard-index cache (decoded
    indexes) and the chunk-data cache (raw chunk bytes) are each one of these.

    Args:
        max_bytes: the bytes its entries may be charged in all (least recently used
            entries leave first).
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._lru: LRUCache[Hashable, CacheEntry] = LRUCache(max_bytes, getsizeof=_entry_size)
        self._lock = threading.Lock()
        self._loading: dict[Hashable, asyncio.Task[CacheEntry]] = {}
        self._overtaken: set[Hashable] = set()  # put or invalidated while a load ran
        #: Changes whenever an entry is replaced, evicted or dropped (not when one is
        #: added, or confirmed with :meth:`touch`): the entries seen cached are all still
        #: cached, unchanged, while it stays the same (for users that remember answers
        #: built from entries).
        self.generation = 0

    @property
    def current_bytes(self) -> int:
        """Bytes charged by the entries held now."""
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)

    def peek(self, key: Hashable) -> CacheEntry | None:
        """The entry for ``key`` if cached, without loading."""
        with self._lock:
            return self._lru.get(key)

    def touch(self, key: Hashable, entry: CacheEntry) -> None:
        """Mark ``entry`` (still cached under ``key``) as confirmed now: its age restarts."""
        with self._lock:
            if self._lru.get(key) is entry:
                self._lru[key] = dataclasses.replace(entry, loaded_at=time.monotonic())

    def put(self, key: Hashable, value: Any, version: str | None, nbytes: int) -> CacheEntry:
        """Store an entry (a ``None`` value records a missing object)."""
        entry = self.make_entry(value, version, nbytes)
        self._overtake(key)
        self._store(key, entry)
        return entry

    def _overtake(self, key: Hashable) -> None:
        """A load running for ``key`` must not store its (now older) result."""
        if key in self._loading:
            self._overtaken.add(key)

    def _store(self, key: Hashable, entry: CacheEntry) -> None:
        if _entry_size(entry) <= self.max_bytes:  # an entry larger than the budget is not kept
            with self._lock:
                lru = self._lru
                replaced = key in lru
                count = len(lru)
                lru[key] = entry
                if replaced or len(lru) != count + 1:  # an entry was replaced or evicted
                    self.generation += 1

    def invalidate(self, key: Hashable) -> None:
        """Forget ``key``."""
        self._overtake(key)
        with self._lock:
            if self._lru.pop(key, None) is not None:
                self.generation += 1

    def invalidate_namespace(self, namespace: Hashable) -> None:
        """Forget every key that is a tuple starting with ``namespace``."""
        for key in list(self._loading):
            if isinstance(key, tuple) and key and key[0] == namespace:
                self._overtaken.add(key)
        with self._lock:
            stale = [k for k in self._lru if isinstance(k, tuple) and k and k[0] == namespace]
            for key in stale:
                self._lru.pop(key, None)
            self.generation += 1

    def clear(self) -> None:
        """Forget everything."""
        self._overtaken.update(self._loading)
        with self._lock:
            self._lru.clear()
            self.generation += 1

    async def get(self, key: Hashable, load: Callable[[], Awaitable[CacheEntry]]) -> CacheEntry:
        """The entry for ``key``, loading it with ``load()`` once for concurrent callers.

        ``load`` returns an entry made with :meth:`make_entry`; it is cached if it fits.
        """
        entry = self.peek(key)
        if entry is not None:
            self.stats.hits += 1
            return entry
        loop = asyncio.get_running_loop()
        task = self._loading.get(key)
        if task is not None and task.get_loop() is loop:
            self.stats.joined += 1
            return await asyncio.shield(task)
        self.stats.misses += 1
        task = loop.create_task(self._load(key, load))
        self._loading[key] = task
        return await asyncio.shield(task)

    async def _load(self, key: Hashable, load: Callable[[], Awaitable[CacheEntry]]) -> CacheEntry:
        try:
            entry = await load()
            if key not in self._overtaken:
                self._store(key, entry)
            return entry
        finally:
            if self._loading.get(key) is asyncio.current_task():
                del self._loading[key]
                self._overtaken.discard(key)

    @staticmethod
    def make_entry(value: Any, version: str | None, nbytes: int) -> CacheEntry:
        """An entry to return from a loader."""
        return CacheEntry(value, version, nbytes, time.monotonic())


_default: LoadingCache | None = None


def default_cache() -> LoadingCache:
    """The process-wide cache that sharded stores share unless given their own."""
    global _default
    if _default is None:
        _default = LoadingCache()
    return _default
