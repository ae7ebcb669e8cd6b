"""Chunk writes: read-merge-write of whole shards, merged per shard and tick.

A write of chunks is a list of :data:`~asyncshard.sharding.engine.strategy.Change` per
shard. A shard whose every chunk is given (and no change depends on the current value) is
built without reading; otherwise the shard is read whole, the changes applied in order
and the result written back conditionally, retried on conflict
(:func:`~asyncshard.sharding.common.read_merge_write`). Concurrent single writes of one
shard in one event-loop tick are merged into one shard write. A caller's condition
(``if_match``, ``if_absent``) is checked per chunk and fails only that chunk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from asyncshard.cache import Ticket
from asyncshard.errors import ConflictError
from asyncshard.sharding.batching import Batcher
from asyncshard.sharding.common import UNCHANGED, Unchanged, read_merge_write
from asyncshard.sharding.engine.indexes import ShardIndexes
from asyncshard.sharding.engine.strategy import C, Change, Current
from asyncshard.store import BytesLike, GetResult, ObjectMeta, apply_runs, check_condition

__all__ = ["Job", "ShardWrites", "constant", "erase", "if_version", "patcher"]

#: One object's part of a write: the keys it serves and the work (see ``fanout.run_writes``).
Job = tuple[Sequence[str], Awaitable[object]]


def constant(value: BytesLike) -> Change:
    """A change writing ``value``."""
    return lambda _current: value


def erase(_current: Current[Any]) -> None:
    """A change erasing the chunk."""
    return None


def patcher(runs: Sequence[tuple[int, BytesLike]]) -> Change:
    """A change patching byte runs ``(start, bytes)`` into the chunk's raw bytes."""
    return lambda current: apply_runs(current.value(), runs)


def if_version(
    key: str, value: BytesLike | None, if_match: str | None, if_absent: bool = False
) -> Change:
    """A change writing ``value`` (``None``: erasing) only under the caller's condition."""

    def change(current: Current[Any]) -> BytesLike | None:
        meta = ObjectMeta(key, 0, current.version) if current.exists else None
        check_condition(key, meta, if_match, if_absent)
        return value

    return change


#: The "current value" handed to unconditional changes of a whole-shard write.
_NO_CURRENT: Current[Any] = Current(None, None, None, "", None)


@dataclass(frozen=True, slots=True)
class _Write(Generic[C]):
    key: str
    shard_key: str
    chunk: C
    change: Change
    conditional: bool


class ShardWrites(Generic[C]):
    """The write side of a sharded adapter (``indexes``: its shard indexes)."""

    def __init__(self, indexes: ShardIndexes[C]) -> None:
        self.indexes = indexes
        self.format = indexes.format
        self.inner = indexes.inner
        self._batches: Batcher[_Write[C], str | None] = Batcher(
            self._write_shard, lambda write: write.shard_key, settle_on_cancel=True
        )

    def _wrote(
        self, shard_key: str, shard: BytesLike | None, version: str | None, ticket: Ticket
    ) -> None:
        """Remember a shard just written (``None``: deleted): its index (``ticket``: taken
        before the write was sent), and the shard itself for the next read-merge-write of
        it (:meth:`ShardIndexes.keep`)."""
        if shard is None:
            self.indexes.release(ticket)
            self.indexes.forget(shard_key)
            return
        self.indexes.remember(shard_key, shard, version, ticket, written=True)
        self.indexes.keep(shard_key, shard, version)

    async def submit(
        self, key: str, shard_key: str, chunk: C, change: Change, *, conditional: bool
    ) -> str | None:
        """One chunk's change, merged with the concurrent writes of its shard in this
        tick; the shard's new version."""
        return await self._batches.submit(_Write(key, shard_key, chunk, change, conditional))

    async def _write_shard(self, writes: Sequence[_Write[C]]) -> list[str | BaseException | None]:
        """Apply concurrent writes of one shard in one shard write (submission order)."""
        shard_key = writes[0].shard_key
        chunks = {w.chunk for w in writes}
        unconditional = not any(w.conditional or w.change is erase for w in writes)
        if unconditional and self.format.is_whole(shard_key, chunks):
            raw = {w.chunk: w.change(_NO_CURRENT) or b"" for w in writes}
            version = await self.write_whole(shard_key, raw)
            return [version] * len(writes)
        version, failed = await self._update(shard_key, [(w.chunk, w.change) for w in writes])
        return [failed.get(i, version) for i in range(len(writes))]

    async def write_whole(self, shard_key: str, raw: Mapping[C, BytesLike]) -> str | None:
        """Replace a shard by one built from ``raw`` chunks, without reading it."""
        fmt = self.format
        shard = fmt.build(shard_key, {c: fmt.encode(v) for c, v in raw.items()})
        self.indexes.forget(shard_key)
        ticket = self.indexes.ticket(shard_key)
        try:
            version = await self.inner.set(shard_key, shard)
            self._wrote(shard_key, shard, version, ticket)
        finally:
            self.indexes.release(ticket)
        return version

    async def _update(
        self, shard_key: str, changes: Sequence[tuple[C, Change]]
    ) -> tuple[str | None, dict[int, BaseException]]:
        """Read-merge-write one shard; returns its new version and the changes whose own
        conditions failed (by index; those changed nothing)."""
        fmt = self.format
        failed: dict[int, BaseException] = {}
        tickets: list[Ticket] = []  # one per rebuild, taken after it forgot the index

        def rebuild(current: GetResult | None) -> BytesLike | Unchanged | None:
            failed.clear()
            version = None if current is None else current.meta.version
            chunks: dict[C, BytesLike] = {}
            if current is not None:
                chunks = dict(fmt.split(shard_key, memoryview(current.data)))
            for i, (chunk, change) in enumerate(changes):
                try:
                    new = change(Current(chunks.get(chunk), version, fmt, shard_key, chunk))
                except ConflictError as exc:
                    failed[i] = exc
                    continue
                # changes apply one after another: later ones see the shard's next version,
                # which no caller holds (two writers holding one version: one wins)
                version = None
                if new is None:
                    chunks.pop(chunk, None)
                else:
                    chunks[chunk] = fmt.encode(new)
            if len(failed) == len(changes):
                return UNCHANGED
            self.indexes.forget(shard_key)
            tickets.append(self.indexes.ticket(shard_key))
            return fmt.build(shard_key, chunks) if chunks else None

        try:
            version = await read_merge_write(
                self.inner,
                shard_key,
                rebuild,
                lambda shard, version: self._wrote(shard_key, shard, version, tickets[-1]),
                fmt.empty_shard,
                known=self.indexes.take_kept(shard_key),
                stale=lambda: self.indexes.kept_was_stale(shard_key),
            )
        finally:
            for ticket in tickets:
                self.indexes.release(ticket)
        return version, dict(failed)

    async def apply(self, shard_key: str, changes: Sequence[tuple[C, Change]]) -> None:
        """Read-merge-write one shard, raising the first failed condition."""
        _, failed = await self._update(shard_key, changes)
        if failed:
            raise next(iter(failed.values()))

    def chunk_writes(
        self,
        by_shard: Mapping[str, Sequence[tuple[str, C, BytesLike]]],
        *,
        replace: bool = False,
    ) -> list[Job]:
        """One job per shard writing ``(key, chunk, raw bytes)`` triples: a whole-shard
        write when they cover the shard (or ``replace``), else a read-merge-write."""
        jobs: list[Job] = []
        for shard_key, members in by_shard.items():
            raw = {chunk: value for _, chunk, value in members}
            keys = [key for key, _, _ in members]
            if replace or self.format.is_whole(shard_key, raw.keys()):
                jobs.append((keys, self.write_whole(shard_key, raw)))
            else:
                changes = [(c, constant(v)) for c, v in raw.items()]
                jobs.append((keys, self.apply(shard_key, changes)))
        return jobs

    def chunk_erases(
        self, by_shard: Mapping[str, Sequence[tuple[str, C]]], plain: Sequence[str] = ()
    ) -> list[Job]:
        """Jobs erasing chunks: shards losing every chunk are deleted directly (with the
        ``plain`` keys of the wrapped store, in one call), the others read-merge-written."""
        whole = [s for s, m in by_shard.items() if self._covers(s, [c for _, c in m])]
        jobs: list[Job] = []
        if plain or whole:
            for shard_key in whole:
                self.indexes.forget(shard_key)
            keys = [*plain, *(k for s in whole for k, _ in by_shard[s])]
            jobs.append((keys, self.inner.erase_values([*plain, *whole])))
        for shard_key, members in by_shard.items():
            if shard_key not in whole:
                changes = [(chunk, erase) for _, chunk in members]
                jobs.append(([k for k, _ in members], self.apply(shard_key, changes)))
        return jobs

    def _covers(self, shard_key: str, chunks: Collection[C]) -> bool:
        return self.format.is_whole(shard_key, set(chunks))
