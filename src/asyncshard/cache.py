"""The caches of sharded stores: a byte-charged LRU with single-flight loading.

Sharded stores keep decoded indexes in one (Zarr shard indexes, precomputed shard and
minishard indexes), shared by every sharded store of the process unless a store is
given its own; a store given a ``data_cache`` keeps chunk bytes in another. Properties:

* **Charged by bytes**: each entry costs what it holds in memory: its ``nbytes``
  (the payload) plus the objects around it, measured (the numpy array headers, the
  version string) or fixed (:data:`ENTRY_OVERHEAD`: the entry, its key, the LRU's
  bookkeeping); the least recently used entries leave when the budget is exceeded. A
  decoded index of a 4x4-chunk shard holds 256 bytes of table in about 950 bytes of
  objects, so charging the table alone (as this cache once did) let a budget hold
  twice to three times its bytes of small indexes.
* **Single-flight**: concurrent misses for one key make one load; the others await it.
* **Versioned**: an entry carries the version of the object it was decoded from, so a
  reader can condition its data reads on it and drop the entry when it is stale.
* **Aged**: an entry knows when it was loaded (or last confirmed with :meth:`touch`), so
  its user can decide when to revalidate it; the cache itself never expires entries.
* **Never older**: versions (ETags) do not say which of two answers is newer, so order
  comes from when requests start. A request whose answer may be cached takes a
  :class:`Ticket` before it starts (loads take theirs themselves); a put or an
  invalidation of the key meanwhile overtakes it, and an overtaken answer is not
  cached (:meth:`LoadingCache.offer`), nor is an overtaken load joined by a later caller.
  So an entry put when a write was acknowledged is replaced only by an answer to a
  request that started after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from cachetools import LRUCache

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
#: Bytes charged per entry for what every entry holds beyond its value and version,
#: measured with ``tracemalloc`` on CPython 3.11-3.13: the :class:`CacheEntry` (64)
#: and its load time (24), the key tuple (64) and a shard key string (about 80), and
#: the LRU's dicts and order (130-200 per entry as they grow).
ENTRY_OVERHEAD = 420


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A decoded index (``value``; ``None`` when the object is missing) and its version."""

    value: Any
    version: str | None
    nbytes: int
    loaded_at: float
    #: What the entry is charged: ``nbytes`` plus its objects (:func:`charge_of`).
    charge: int = 0

    @property
    def missing(self) -> bool:
        """Whether the entry records that the object does not exist."""
        return self.value is None


class Ticket:
    """Taken for ``key`` when a request whose answer may be cached starts: ``overtaken``
    once the key is put or invalidated meanwhile (the answer may then be older than
    what the cache learned since). Released by :meth:`LoadingCache.offer` or
    :meth:`LoadingCache.release`."""

    __slots__ = ("key", "overtaken")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.overtaken = False


def _headers(value: Any) -> int:
    """Bytes of the objects holding ``value`` beyond its payload: numpy arrays down
    their chain of bases (a reshaped copy is two headers), else the object itself."""
    if isinstance(value, bytes | bytearray):
        return sys.getsizeof(value) - len(value)
    if not isinstance(value, np.ndarray):
        return 0 if value is None else sys.getsizeof(value)
    total = 0
    while isinstance(value, np.ndarray):
        total += sys.getsizeof(value) - (value.nbytes if value.flags.owndata else 0)
        value = value.base
    return total


def charge_of(value: Any, version: str | None, nbytes: int) -> int:
    """What an entry of ``value`` (``nbytes`` of payload) at ``version`` is charged."""
    version_bytes = 0 if version is None else sys.getsizeof(version)
    return nbytes + _headers(value) + version_bytes + ENTRY_OVERHEAD


def _entry_size(entry: CacheEntry) -> int:
    return entry.charge or charge_of(entry.value, entry.version, entry.nbytes)


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
        self._loading: dict[Hashable, tuple[asyncio.Task[CacheEntry], Ticket]] = {}
        self._tickets: dict[Hashable, list[Ticket]] = {}  # of requests still running
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

    def ticket(self, key: Hashable) -> Ticket:
        """A :class:`Ticket` for a request about to start; hand it to :meth:`offer` (or
        :meth:`release`) when the request ends, however it ends."""
        ticket = Ticket(key)
        with self._lock:
            self._tickets.setdefault(key, []).append(ticket)
        return ticket

    def release(self, ticket: Ticket) -> None:
        """The ticket's request ended (idempotent)."""
        with self._lock:
            held = self._tickets.get(ticket.key)
            if held is not None and ticket in held:
                held.remove(ticket)
                if not held:
                    del self._tickets[ticket.key]

    def offer(
        self,
        ticket: Ticket,
        value: Any,
        version: str | None,
        nbytes: int,
        *,
        written: bool = False,
    ) -> bool:
        """Store the answer of the request ``ticket`` was taken for, unless the key was
        put or invalidated since it started; releases the ticket. An overtaken read's
        answer is dropped (what overtook it stays); an overtaken write's answer
        (``written``: what the writer was just told is stored) drops the key too, since
        which of two overlapping answers is newer is unknown. Returns whether it was
        stored."""
        self.release(ticket)
        if not ticket.overtaken:
            self.put(ticket.key, value, version, nbytes)
            return True
        if written:
            self.invalidate(ticket.key)
        return False

    def _overtake(self, key: Hashable) -> None:
        """Requests running for ``key`` must not store their (possibly older) answers."""
        with self._lock:
            for ticket in self._tickets.get(key, ()):
                ticket.overtaken = True

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
        with self._lock:
            for key, tickets in self._tickets.items():
                if isinstance(key, tuple) and key and key[0] == namespace:
                    for ticket in tickets:
                        ticket.overtaken = True
            stale = [k for k in self._lru if isinstance(k, tuple) and k and k[0] == namespace]
            for key in stale:
                self._lru.pop(key, None)
            self.generation += 1

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            for tickets in self._tickets.values():
                for ticket in tickets:
                    ticket.overtaken = True
            self._lru.clear()
            self.generation += 1

    async def get(self, key: Hashable, load: Callable[[], Awaitable[CacheEntry]]) -> CacheEntry:
        """The entry for ``key``, loading it with ``load()`` once for concurrent callers.

        ``load`` returns an entry made with :meth:`make_entry`; it is cached if it fits
        and the key was not put or invalidated while it ran. A caller joins a running
        load only if nothing overtook it: a load that started before a put or an
        invalidation may answer with what that change replaced.
        """
        entry = self.peek(key)
        if entry is not None:
            self.stats.hits += 1
            return entry
        loop = asyncio.get_running_loop()
        running = self._loading.get(key)
        if running is not None and running[0].get_loop() is loop and not running[1].overtaken:
            self.stats.joined += 1
            return await asyncio.shield(running[0])
        self.stats.misses += 1
        ticket = self.ticket(key)
        task = loop.create_task(self._load(key, load, ticket))
        self._loading[key] = (task, ticket)
        return await asyncio.shield(task)

    async def _load(
        self, key: Hashable, load: Callable[[], Awaitable[CacheEntry]], ticket: Ticket
    ) -> CacheEntry:
        try:
            entry = await load()
            self.release(ticket)
            if not ticket.overtaken:
                self._overtake(key)  # loads started before this one answer older
                self._store(key, entry)
            return entry
        finally:
            self.release(ticket)
            running = self._loading.get(key)
            if running is not None and running[0] is asyncio.current_task():
                del self._loading[key]

    @staticmethod
    def make_entry(value: Any, version: str | None, nbytes: int) -> CacheEntry:
        """An entry to return from a loader."""
        return CacheEntry(
            value, version, nbytes, time.monotonic(), charge_of(value, version, nbytes)
        )


_default: LoadingCache | None = None


def default_cache() -> LoadingCache:
    """The process-wide cache that sharded stores share unless given their own."""
    global _default
    if _default is None:
        _default = LoadingCache()
    return _default
