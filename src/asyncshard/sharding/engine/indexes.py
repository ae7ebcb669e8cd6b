"""An adapter's shard indexes: its slice of the index cache, revalidation, staleness.

:class:`ShardIndexes` is the :class:`~asyncshard.sharding.engine.strategy.IndexIO` a
format's index code works through, and the engine's one place for "is this index still
the shard's": answers not checked by a data read ("no such chunk", ``head``) come from an
index at most ``recheck_after`` seconds old, an older one is revalidated with one
``head`` of the shard per window (single-flight); a read that finds its shard changed
raises :class:`Stale`, and :meth:`ShardIndexes.retry_stale` is the one retry loop.

Read-your-writes: a write caches the index of the shard it stored when the store
acknowledges it, and an answer to a request that started before that (a whole-shard
read, an index load, another write of the shard) never replaces it: each such request
holds a :class:`~asyncshard.cache.Ticket` (:meth:`ShardIndexes.ticket`) and its answer
is only offered to the cache.

It also keeps the shards the adapter wrote last (:meth:`ShardIndexes.keep`), for its
next read-merge-write of them, in one process-wide budget (:data:`KEPT_SHARDS`): every
way the adapter learns a shard changed (``forget``, ``forget_all``) drops them too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from asyncshard.cache import CacheEntry, LoadingCache, Ticket
from asyncshard.errors import ConflictError
from asyncshard.sharding.common import new_namespace
from asyncshard.sharding.engine.strategy import C, Found, ShardFormat
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store

__all__ = ["STALE_RETRIES", "ShardIndexes", "Stale"]

#: Reads retried with a fresh index before a shard that keeps changing is read whole.
STALE_RETRIES = 3

#: Shards adapters wrote last, kept for their next read-merge-write (process-wide
#: budget, least recently written out first).
KEPT_SHARDS = LoadingCache(64 * 1024 * 1024)
#: Seconds a shard is not kept after a kept copy of it turned out stale (another writer
#: takes turns on it: each update would pay a failed write before its read).
KEEP_PAUSE = 10.0
_MAX_PAUSED = 1024

T = TypeVar("T")


class Stale(Exception):
    """A read conditioned on a cached index found its shard changed or gone."""

    def __init__(self, shard_key: str) -> None:
        super().__init__(shard_key)
        self.shard_key = shard_key


@contextmanager
def stale_on_conflict(shard_key: str) -> Iterator[None]:
    """Turn a format's ``ConflictError`` about ``shard_key`` (a deeper index level read
    under a changed shard) into :class:`Stale`; other conflicts pass."""
    try:
        yield
    except ConflictError as exc:
        if exc.key != shard_key:
            raise
        raise Stale(shard_key) from None


class ShardIndexes(Generic[C]):
    """The indexes of one adapter's shards, cached under its own namespace."""

    def __init__(
        self, inner: Store, fmt: ShardFormat[C, Any], cache: LoadingCache, recheck_after: float
    ) -> None:
        if recheck_after < 0:
            raise ValueError("recheck_after must be >= 0")
        self.inner = inner
        self.format = fmt
        self.cache = cache
        self.recheck_after = recheck_after
        self.namespace = new_namespace(fmt.kind)
        self._rechecks: dict[str, asyncio.Task[bool]] = {}
        self._paused: dict[str, float] = {}  # shard key -> monotonic time keeping resumes

    # -- IndexIO ------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.inner

    async def cached(
        self, name: tuple[Hashable, ...], load: Callable[[], Awaitable[CacheEntry]]
    ) -> CacheEntry:
        return await self.cache.get((self.namespace, *name), load)

    def put(
        self, name: tuple[Hashable, ...], value: object, version: str | None, nbytes: int
    ) -> None:
        self.cache.put((self.namespace, *name), value, version, nbytes)

    def peek(self, name: tuple[Hashable, ...]) -> CacheEntry | None:
        return self.cache.peek((self.namespace, *name))

    # -- the top-level index of a shard -------------------------------------------------

    def top(self, shard_key: str) -> CacheEntry | None:
        """The shard's cached top-level index entry, if cached (no I/O)."""
        return self.cache.peek((self.namespace, *self.format.index_name(shard_key)))

    def confirm(self, shard_key: str, entry: CacheEntry) -> None:
        """The shard was just read at ``entry``'s version (a conditioned read succeeded):
        its cached top-level index is recent again."""
        self.cache.touch((self.namespace, *self.format.index_name(shard_key)), entry)

    def forget(self, shard_key: str) -> None:
        """Drop a shard's top-level index (deeper entries are keyed by its version) and
        its kept copy."""
        self.cache.invalidate((self.namespace, *self.format.index_name(shard_key)))
        KEPT_SHARDS.invalidate((self.namespace, shard_key))

    def forget_all(self) -> None:
        """Drop every index and kept shard of this adapter."""
        self.cache.invalidate_namespace(self.namespace)
        KEPT_SHARDS.invalidate_namespace(self.namespace)

    # -- shards kept as written -----------------------------------------------------------

    def keep(self, shard_key: str, shard: BytesLike, version: str | None) -> None:
        """Keep a shard just written at ``version`` where a copy can be trusted by
        version: conditional writes, and versions that pin the bytes."""
        inner = self.inner
        if version is None or not inner.supports_conditional_writes:
            return
        if not inner.version_pins_bytes(version):
            return
        if shard_key in self._paused:
            if time.monotonic() < self._paused[shard_key]:
                return
            del self._paused[shard_key]
        data = shard if isinstance(shard, bytes | memoryview) else bytes(shard)
        KEPT_SHARDS.put((self.namespace, shard_key), data, version, len(data))

    def take_kept(self, shard_key: str) -> GetResult | None:
        """The kept copy of a shard, if any (taken: a write keeps its result anew)."""
        entry = KEPT_SHARDS.peek((self.namespace, shard_key))
        if entry is None:
            return None
        KEPT_SHARDS.invalidate((self.namespace, shard_key))
        return GetResult(entry.value, ObjectMeta(shard_key, entry.nbytes, entry.version))

    def kept_was_stale(self, shard_key: str) -> None:
        """A kept copy of the shard was out of date: keep none of it for a while."""
        if len(self._paused) >= _MAX_PAUSED:
            now = time.monotonic()
            self._paused = {k: t for k, t in self._paused.items() if t > now}
        if len(self._paused) < _MAX_PAUSED:
            self._paused[shard_key] = time.monotonic() + KEEP_PAUSE

    def ticket(self, shard_key: str) -> Ticket:
        """A ticket for the shard's top-level index, taken before a request whose answer
        :meth:`remember` may cache (see :meth:`LoadingCache.offer`); release it with
        :meth:`release` however the request ends."""
        return self.cache.ticket((self.namespace, *self.format.index_name(shard_key)))

    def release(self, ticket: Ticket) -> None:
        self.cache.release(ticket)

    def remember(
        self,
        shard_key: str,
        shard: BytesLike,
        version: str | None,
        ticket: Ticket,
        *,
        written: bool = False,
    ) -> None:
        """Cache the index of a shard at hand, unless ``ticket`` was overtaken (see
        :meth:`LoadingCache.offer`; ``written``: the shard was just written); without a
        version (a later rewrite could not be noticed) forget it instead."""
        if version is None:
            self.release(ticket)
            self.forget(shard_key)
        else:
            self.format.remember(
                _Offering(self, ticket, written), shard_key, memoryview(shard), version
            )

    def remember_missing(self, shard_key: str, ticket: Ticket) -> None:
        """Record that the shard does not exist, unless ``ticket`` was overtaken."""
        self.cache.offer(ticket, None, None, 0)

    # -- lookups ------------------------------------------------------------------------

    async def find(self, shard_key: str, chunks: Sequence[C], *, checked: bool) -> Found[C]:
        """``format.find``; ``checked``: every answer (not only "no such chunk") must come
        from a recent index. A deeper index level found the shard changed: :class:`Stale`."""
        with stale_on_conflict(shard_key):
            found = await self.format.find(self, shard_key, chunks)
            if checked:
                found = await self.recheck(shard_key, chunks, found)
        return found

    async def recheck(self, shard_key: str, chunks: Sequence[C], found: Found[C]) -> Found[C]:
        """``found``, or a fresh lookup when its index is older than ``recheck_after`` and
        the shard changed since (one ``head`` of the shard per window, single-flight)."""
        if time.monotonic() - found.loaded_at <= self.recheck_after and self.recheck_after > 0:
            return found
        loop = asyncio.get_running_loop()
        task = self._rechecks.get(shard_key)
        if task is None or task.get_loop() is not loop:
            task = loop.create_task(self._unchanged(shard_key, found))
            self._rechecks[shard_key] = task
            task.add_done_callback(lambda t: self._drop_recheck(shard_key, t))
        if await asyncio.shield(task):
            return found
        return await self.format.find(self, shard_key, chunks)

    def _drop_recheck(self, shard_key: str, task: asyncio.Task[bool]) -> None:
        if self._rechecks.get(shard_key) is task:
            del self._rechecks[shard_key]

    async def _unchanged(self, shard_key: str, found: Found[C]) -> bool:
        """Whether the shard is still what ``found`` says (then its index is touched)."""
        meta = await self.inner.head(shard_key)
        same = (meta is None and not found.exists) or (
            meta is not None
            and found.exists
            and found.version is not None
            and meta.version == found.version
        )
        name = (self.namespace, *self.format.index_name(shard_key))
        entry = self.cache.peek(name)
        if same and entry is not None and entry.version == found.version:
            self.cache.touch(name, entry)
        elif not same:
            self.forget(shard_key)
        return same

    async def retry_stale(
        self,
        shard_key: str,
        attempt: Callable[[], Awaitable[T]],
        snapshot: Callable[[], Awaitable[T]],
    ) -> T:
        """``attempt()``, again with a fresh index each time it finds the shard stale; a
        shard that keeps changing (:data:`STALE_RETRIES` retries) is served by
        ``snapshot()``, which reads it whole: one consistent state."""
        for _ in range(STALE_RETRIES + 1):
            try:
                return await attempt()
            except Stale:
                self.forget(shard_key)
        return await snapshot()


class _Offering:
    """The :class:`~asyncshard.sharding.engine.strategy.IndexIO` a format remembers a
    shard through: its top-level index is offered under the request's ticket."""

    __slots__ = ("indexes", "ticket", "written")

    def __init__(self, indexes: ShardIndexes[Any], ticket: Ticket, written: bool) -> None:
        self.indexes = indexes
        self.ticket = ticket
        self.written = written

    @property
    def store(self) -> Store:
        return self.indexes.inner

    async def cached(
        self, name: tuple[Hashable, ...], load: Callable[[], Awaitable[CacheEntry]]
    ) -> CacheEntry:
        return await self.indexes.cached(name, load)

    def put(
        self, name: tuple[Hashable, ...], value: object, version: str | None, nbytes: int
    ) -> None:
        if (self.indexes.namespace, *name) == self.ticket.key:
            self.indexes.cache.offer(self.ticket, value, version, nbytes, written=self.written)
        else:  # a deeper level, named by the shard's version
            self.indexes.put(name, value, version, nbytes)

    def peek(self, name: tuple[Hashable, ...]) -> CacheEntry | None:
        return self.indexes.peek(name)
