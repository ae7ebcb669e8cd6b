"""Chunk reads: the lean single read, per-shard batches, whole-shard snapshots.

A read names its chunk by :class:`~asyncshard.sharding.engine.strategy.ChunkRead`. The
first single read of an event-loop tick whose shard index is cached and recent goes out
at once as one range read conditioned on the index's version (the lean path: the whole
chunk when the format decodes chunks or a data cache keeps them, no read at all when the
data cache holds the chunk already); the reads
that follow it in the tick are batched per shard
(:class:`~asyncshard.sharding.batching.Batcher`). A batch looks its chunks up through
the cached indexes and reads their bytes in one coalesced round conditioned on the
index's version, so a rewritten shard is noticed by the read itself (:class:`Stale`,
retried with a fresh index by :meth:`ShardIndexes.retry_stale`). Every in-bounds chunk
of an uncached shard asked at once: one whole-object read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic

from asyncshard.cache import CacheEntry, LoadingCache
from asyncshard.errors import ConflictError, CorruptShardError, FormatError
from asyncshard.ranges import Range, resolve
from asyncshard.sharding.batching import Batcher, group_by
from asyncshard.sharding.engine.indexes import ShardIndexes, Stale, stale_on_conflict
from asyncshard.sharding.engine.strategy import MISS, C, ChunkRead, Found, Miss
from asyncshard.store import WOULD_WAIT, Data, GetResult, ObjectMeta, WouldWait, check_condition

__all__ = ["INLINE_DECODE_NBYTES", "Outcome", "ShardReads", "raised"]

#: Decoded chunk bytes up to which decoding runs on the event loop (else in a thread).
INLINE_DECODE_NBYTES = 1 << 20
#: Worst-case deflate expansion: output bytes per input byte.
_DEFLATE_RATIO = 1032

#: One read's outcome inside the engine: its result, or the error that failed it alone
#: (a chunk that does not decode fails its own read, not its batch's).
Outcome = GetResult | FormatError | None


def raised(outcome: Outcome) -> GetResult | None:
    """The result of an outcome; the error that failed it is raised."""
    if isinstance(outcome, FormatError):
        raise outcome
    return outcome


def _past_end(rng: Range, shard_key: str) -> CorruptShardError:
    return CorruptShardError(
        f"chunk bytes [{rng.start}, {rng.end}) lie past the end of the shard", key=shard_key
    )


class ShardReads(Generic[C]):
    """The read side of a sharded adapter.

    Args:
        indexes: the adapter's shard indexes (and through them the wrapped store).
        data_cache: where decoded chunk bytes are kept by shard version, or ``None``.
        lean_reads: whether the first single read of a tick may take the lean path.
    """

    def __init__(
        self, indexes: ShardIndexes[C], data_cache: LoadingCache | None, lean_reads: bool
    ) -> None:
        self.indexes = indexes
        self.format = indexes.format
        self.inner = indexes.inner
        self.data_cache = data_cache
        self.lean_reads = lean_reads
        self._batches: Batcher[ChunkRead[C], GetResult | None] = Batcher(
            self.read_shard, lambda read: read.shard_key
        )
        self._lean_tick = False
        self._ticks = 0  # lean ticks ended

    # -- single reads ---------------------------------------------------------------------

    async def read_one(self, read: ChunkRead[C]) -> GetResult | None:
        """One chunk read: the lean path when it applies, else a batch with the reads of
        the same tick (a read with a caller's condition runs alone: it may fail)."""
        if read.if_match is not None:
            [result] = await self.read_shard([read])
            return raised(result)
        if self.lean_reads and not self._batches.pending() and not self._lean_tick:
            # the first read of this tick: the lean path (the next ones of the same tick
            # are batched, since they may share a shard and a request)
            self._lean_tick = True
            asyncio.get_running_loop().call_soon(self._end_lean_tick)
            ticks = self._ticks
            direct = await self._read_warm(read)
            if self._ticks == ticks:  # done within its tick: nothing could join it, so
                self._lean_tick = False  # the caller's next read may be lean too
            if isinstance(direct, FormatError):
                raise direct
            if not isinstance(direct, Miss):
                return direct
        return await self._batches.submit(read)

    def _end_lean_tick(self) -> None:
        self._lean_tick = False
        self._ticks += 1

    async def _read_warm(self, read: ChunkRead[C]) -> Outcome | Miss:
        """One chunk whose shard index is cached and recent: one conditioned range read
        (none when the data cache holds the chunk), no batch, no task. ``MISS`` when
        that does not apply (then the batch path runs)."""
        plan = self._plan_warm(read, confirm=False)
        if not isinstance(plan, _Warm):
            return plan
        try:
            got = await self.inner.get_object(read.shard_key, plan.rng, if_match=plan.version)
        except ConflictError:  # the shard changed: the batch path refreshes the index
            got = None
        stored = self._check_warm(read, plan, got)
        if not isinstance(stored, _Stored):
            return stored
        if not plan.whole:
            return stored.result
        try:
            return _cut(read, await self._raw(read, stored.data, plan.version), plan.version)
        except FormatError as exc:  # this chunk is corrupt: its read fails, nothing else
            return exc

    def read_now(self, read: ChunkRead[C]) -> Outcome | WouldWait:
        """:meth:`_read_warm` when it needs no waiting: the index is cached, the chunk in
        the data cache or readable by the wrapped store's ``get_now``, and any decoding
        small. An index older than ``recheck_after`` is confirmed by the read itself
        (conditioned on its version) instead of a ``head``. Else :data:`WOULD_WAIT`."""
        if read.if_match is not None:
            return WOULD_WAIT
        plan = self._plan_warm(read, confirm=True)
        if not isinstance(plan, _Warm):
            return WOULD_WAIT if isinstance(plan, Miss) else plan
        if plan.whole and self.format.encoded and not self._decodes_inline(read, plan.size):
            return WOULD_WAIT
        try:
            got = self.inner.get_now(read.shard_key, plan.rng, if_match=plan.version)
        except ConflictError:
            got = None
        if isinstance(got, WouldWait):
            return got
        stored = self._check_warm(read, plan, got)
        if not isinstance(stored, _Stored):
            return WOULD_WAIT if isinstance(stored, Miss) else stored
        if not plan.whole:
            return stored.result
        try:
            raw = self.format.decode(stored.data, read.shard_key, read.chunk)
        except FormatError as exc:
            return exc
        return _cut(read, self._keep_raw(read, raw, plan.version), plan.version)

    def cached_until(self, read: ChunkRead[C]) -> float | None:
        """Until when (``time.monotonic``) :meth:`read_now` answers ``read`` from the
        caches alone: its chunk is in the data cache at the version of the shard's cached
        index, which stays recent until then. ``None`` when it is not so."""
        if self.data_cache is None or read.if_match is not None:
            return None
        entry = self.indexes.top(read.shard_key)
        if entry is None or entry.missing or entry.version is None:
            return None
        if self.data_cache.peek(self._data_name(read.shard_key, entry.version, read.chunk)) is None:
            return None
        return entry.loaded_at + self.indexes.recheck_after

    def recent_until(self, shard_key: str) -> float | None:
        """Until when (``time.monotonic``) the shard's cached index is recent (a read
        that confirms it moves this on); ``None`` when none is cached."""
        entry = self.indexes.top(shard_key)
        if entry is None:
            return None
        return entry.loaded_at + self.indexes.recheck_after

    def _plan_warm(self, read: ChunkRead[C], *, confirm: bool) -> Outcome | Miss | _Warm:
        """The lean read of ``read``: its answer from the index or the data cache, the
        range to read, or ``MISS`` (the batch path). Answers from the index alone (no
        such chunk, a cached chunk) are trusted only from a recent index, since the shard
        may have changed without a read noticing; with ``confirm`` a cached chunk of an
        older index is read again instead, conditioned on the index's version (a read
        that succeeds confirms the index)."""
        fmt, shard_key = self.format, read.shard_key
        entry = self.indexes.top(shard_key)
        if entry is None or entry.missing or entry.version is None:
            return MISS
        version = entry.version
        where = fmt.lookup(self.indexes, shard_key, entry.value, read.chunk)
        if isinstance(where, Miss):
            return MISS
        recent = time.monotonic() - entry.loaded_at <= self.indexes.recheck_after
        if where is None:
            return None if recent else MISS
        start, end = where
        whole = fmt.encoded or self.data_cache is not None  # the chunk is read whole
        if whole:
            if self.data_cache is not None:
                hit = self.data_cache.peek(self._data_name(shard_key, version, read.chunk))
                if hit is not None and recent:
                    return _cut(read, hit.value, version)
                if hit is not None and not confirm:
                    return MISS
            rng = Range(start, end)
        else:
            a, b = resolve(read.rng, end - start)
            rng = Range(start + a, start + b)
        return _Warm(rng, version, end - start, whole, None if recent else entry)

    def _check_warm(self, read: ChunkRead[C], plan: _Warm, got: GetResult | None) -> _Stored | Miss:
        """The stored bytes a lean read got (a read at the index's version: an old index
        is confirmed by it); ``MISS`` (and the index forgotten) when the shard was gone
        or had changed; ``CorruptShardError`` when they came short."""
        if got is None:
            self.indexes.forget(read.shard_key)
            return MISS
        rng = plan.rng
        if len(got.data) != rng.end - rng.start:
            self.indexes.forget(read.shard_key)
            raise _past_end(rng, read.shard_key)
        if plan.confirms is not None:
            self.indexes.confirm(read.shard_key, plan.confirms)
        return _Stored(got.data, GetResult(got.data, ObjectMeta(read.key, plan.size, plan.version)))

    def _decodes_inline(self, read: ChunkRead[C], stored_size: int) -> bool:
        """Whether decoding the chunk is small enough for the event loop."""
        bound = min(self.format.decoded_limit(read.chunk), stored_size * _DEFLATE_RATIO)
        return bound <= INLINE_DECODE_NBYTES

    # -- many reads -----------------------------------------------------------------------

    async def read_many(self, reads: Sequence[ChunkRead[C]]) -> list[GetResult | None]:
        """:meth:`read_group`, raising the error of a failed read."""
        return [raised(o) for o in await self.read_group(reads)]

    async def read_group(self, reads: Sequence[ChunkRead[C]]) -> list[Outcome]:
        """Read chunks of any shards: one batch per shard, concurrently, results in order."""
        out: list[Outcome] = [None] * len(reads)

        async def one(members: list[int]) -> None:
            results = await self.read_shard([reads[i] for i in members])
            for i, result in zip(members, results, strict=True):
                out[i] = result

        by_shard = group_by(range(len(reads)), lambda i: reads[i].shard_key)
        await asyncio.gather(*(one(m) for m in by_shard.values()))
        return out

    async def read_shard(self, reads: Sequence[ChunkRead[C]]) -> list[Outcome]:
        """Read chunks of one shard: indexes (cached), then one coalesced data round.

        A stale index is dropped and the read runs again; a shard that keeps changing is
        read whole (one consistent snapshot).
        """
        shard_key = reads[0].shard_key
        if len(reads) == 1 and reads[0].if_match is None:  # a batch of one: lean if warm
            direct = await self._read_warm(reads[0])
            if not isinstance(direct, Miss):
                return [direct]
        return await self.indexes.retry_stale(
            shard_key,
            lambda: self._read_shard_once(shard_key, reads),
            lambda: self.read_whole(shard_key, reads),
        )

    async def _read_shard_once(
        self, shard_key: str, reads: Sequence[ChunkRead[C]]
    ) -> list[Outcome]:
        fmt = self.format
        chunks = list(dict.fromkeys(r.chunk for r in reads))
        if self.indexes.top(shard_key) is None and fmt.is_whole(shard_key, chunks):
            return await self.read_whole(shard_key, reads)
        found = await self.indexes.find(shard_key, chunks, checked=False)
        hits = self._cached_data(shard_key, found, chunks)
        if len(found.entries) < len(chunks) or hits:  # answers from the index alone
            with stale_on_conflict(shard_key):  # must come from a recent index
                rechecked = await self.indexes.recheck(shard_key, chunks, found)
            if rechecked is not found:
                found, hits = rechecked, self._cached_data(shard_key, rechecked, chunks)
        out: list[Outcome] = [None] * len(reads)
        fetch: list[tuple[int, Range, int]] = []
        whole = fmt.encoded or self.data_cache is not None
        entries = found.entries
        for i, read in enumerate(reads):
            entry = entries.get(read.chunk)
            if entry is None:
                continue
            start, end = entry
            if read.if_match is not None:  # the caller's own condition: final
                check_condition(read.key, ObjectMeta(read.key, 0, found.version), read.if_match)
            if hits and (cached := hits.get(read.chunk)) is not None:
                out[i] = _cut(read, cached, found.version)
                continue
            if whole or read.rng is None:
                fetch.append((i, Range(start, end), end - start))
            else:
                a, b = resolve(read.rng, end - start)
                fetch.append((i, Range(start + a, start + b), end - start))
        if fetch:
            await self._fetch(shard_key, reads, found, fetch, out)
        return out

    async def _fetch(
        self,
        shard_key: str,
        reads: Sequence[ChunkRead[C]],
        found: Found[C],
        fetch: Sequence[tuple[int, Range, int]],
        out: list[Outcome],
    ) -> None:
        """Read the ``fetch`` ranges of the shard in one coalesced round, conditioned on
        the version of the index that placed them, into ``out``."""
        versions = {shard_key: found.version} if found.version is not None else None
        try:
            data = await self.inner.get_partial_values(
                [(shard_key, rng) for _, rng, _ in fetch], if_match=versions
            )
        except ConflictError:  # only the shard version was a condition here
            raise Stale(shard_key) from None
        decoded: dict[C, Data] = {}
        plain = not self.format.encoded and self.data_cache is None  # the ranges asked
        version = found.version
        for (i, rng, size), value in zip(fetch, data, strict=True):
            if value is None:  # deleted since its index was cached
                raise Stale(shard_key)
            if len(value) != rng.end - rng.start:
                self.indexes.forget(shard_key)
                raise _past_end(rng, shard_key)
            read = reads[i]
            if plain:
                out[i] = GetResult(value, ObjectMeta(read.key, size, version))
                continue
            raw = decoded.get(read.chunk)
            if raw is None:  # once per chunk, however often it was asked
                try:
                    raw = decoded[read.chunk] = await self._raw(read, value, version)
                except FormatError as exc:  # this chunk is corrupt, not its neighbours
                    out[i] = exc
                    continue
            out[i] = _cut(read, raw, version)

    def _cached_data(self, shard_key: str, found: Found[C], chunks: Sequence[C]) -> dict[C, bytes]:
        """The chunks of ``found``'s shard version held by the data cache."""
        cache = self.data_cache
        if cache is None or found.version is None:
            return {}
        hits: dict[C, bytes] = {}
        for chunk in chunks:
            if chunk in found.entries:
                entry = cache.peek(self._data_name(shard_key, found.version, chunk))
                if entry is not None:
                    hits[chunk] = entry.value
        return hits

    def _data_name(self, shard_key: str, version: str, chunk: C) -> tuple[Any, ...]:
        return (self.indexes.namespace, "data", shard_key, version, chunk)

    async def _raw(self, read: ChunkRead[C], stored: Data, version: str | None) -> Data:
        """A whole chunk's raw bytes from its stored bytes (decoded if the format encodes
        them), kept in the data cache when there is one."""
        raw = await self._decode(stored, read) if self.format.encoded else stored
        return self._keep_raw(read, raw, version)

    def _keep_raw(self, read: ChunkRead[C], raw: Data, version: str | None) -> Data:
        """``raw`` (a whole chunk's bytes), put in the data cache when there is one. The
        cache may hold them already (a read that confirmed an older index): bytes of one
        shard version never change, so they are kept as they are (the cache, and what
        was remembered from it, stays unchanged)."""
        if self.data_cache is not None and version is not None:
            name = self._data_name(read.shard_key, version, read.chunk)
            held = self.data_cache.peek(name)
            if held is not None:
                return held.value  # type: ignore[no-any-return]
            owned = raw if isinstance(raw, bytes) else bytes(raw)  # not a view of a big buffer
            self.data_cache.put(name, owned, version, len(owned))
            return owned
        return raw

    async def _decode(self, stored: Data, read: ChunkRead[C]) -> Data:
        """Decode a chunk; work that may be large (by the format's limit and the worst
        expansion of the stored bytes) runs in a thread, off the event loop."""
        fmt = self.format
        if self._decodes_inline(read, len(stored)):
            return fmt.decode(stored, read.shard_key, read.chunk)
        return await asyncio.to_thread(fmt.decode, stored, read.shard_key, read.chunk)

    async def read_whole(self, shard_key: str, reads: Sequence[ChunkRead[C]]) -> list[Outcome]:
        """Read the whole shard in one unconditional request and cut the reads from it."""
        ticket = self.indexes.ticket(shard_key)
        try:
            result = await self.inner.get_object(shard_key)
            if result is None:
                self.indexes.remember_missing(shard_key, ticket)
                return [None] * len(reads)
            view = memoryview(result.data)
            chunks = self.format.split(shard_key, view)
            version = result.meta.version
            self.indexes.remember(shard_key, view, version, ticket)
        finally:
            self.indexes.release(ticket)
        out: list[Outcome] = []
        for read in reads:
            stored = chunks.get(read.chunk)
            if stored is None:
                out.append(None)
                continue
            if read.if_match is not None:
                check_condition(read.key, ObjectMeta(read.key, 0, version), read.if_match)
            try:
                raw = await self._raw(read, stored, version)
            except FormatError as exc:
                out.append(exc)
                continue
            out.append(_cut(read, raw, version))
        return out

    # -- head -----------------------------------------------------------------------------

    async def head(self, read: ChunkRead[C]) -> ObjectMeta | None:
        """A chunk's size and its shard's version (from the index unless the format
        encodes chunks: the raw size then needs the data)."""
        if self.format.encoded:
            [outcome] = await self.read_shard([read])
            result = raised(outcome)
            return None if result is None else result.meta

        async def from_index() -> ObjectMeta | None:
            found = await self.indexes.find(read.shard_key, [read.chunk], checked=True)
            entry = found.entries.get(read.chunk)
            return (
                None if entry is None else ObjectMeta(read.key, entry[1] - entry[0], found.version)
            )

        async def from_snapshot() -> ObjectMeta | None:
            [outcome] = await self.read_whole(read.shard_key, [read])
            result = raised(outcome)
            return None if result is None else result.meta

        return await self.indexes.retry_stale(read.shard_key, from_index, from_snapshot)


@dataclass(frozen=True, slots=True)
class _Warm:
    """A planned lean read: the shard range, the index's version, the chunk's stored
    size, whether the chunk is read whole, and the index entry it confirms (if old)."""

    rng: Range
    version: str
    size: int
    whole: bool
    confirms: CacheEntry | None


@dataclass(frozen=True, slots=True)
class _Stored:
    """A lean read's stored bytes, and its result when the chunk is not read whole."""

    data: Data
    result: GetResult


def _cut(read: ChunkRead[Any], raw: Data, version: str | None) -> GetResult:
    """The range ``read`` asks of a whole chunk's raw bytes."""
    a, b = resolve(read.rng, len(raw))
    return GetResult(memoryview(raw)[a:b], ObjectMeta(read.key, len(raw), version))
