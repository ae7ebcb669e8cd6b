"""ShardedAdapter: a sharded dataset as a Store of its chunk keys, whatever the format.

The adapter routes each key: a key its format locates in a shard is a chunk, read by
:class:`~asyncshard.sharding.engine.reads.ShardReads`, written by
:class:`~asyncshard.sharding.engine.writes.ShardWrites` and listed by
:class:`~asyncshard.sharding.engine.listing.ShardListing`, all three through the
adapter's :class:`~asyncshard.sharding.engine.indexes.ShardIndexes`; every other key
passes through to the wrapped store (``ShardFormat.inner_key``). A write of several
shards waits for all of them before it returns or raises (:func:`~asyncshard.fanout.
run_writes`).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from asyncshard.cache import LoadingCache, default_cache
from asyncshard.errors import InvalidKeyError
from asyncshard.fanout import run_writes
from asyncshard.ranges import ByteRange
from asyncshard.sharding.engine.indexes import ShardIndexes
from asyncshard.sharding.engine.listing import ShardListing
from asyncshard.sharding.engine.reads import ShardReads
from asyncshard.sharding.engine.strategy import C, ChunkRead, Location, ShardFormat
from asyncshard.sharding.engine.writes import Job, ShardWrites, constant, erase, if_version, patcher
from asyncshard.store import (
    BytesLike,
    Data,
    GetResult,
    ObjectMeta,
    Store,
    split_dir,
    validate_key,
    validate_prefix,
)
from asyncshard.wrapper import WrapperStore

__all__ = ["DEFAULT_RECHECK_AFTER", "Routed", "ShardedAdapter"]

#: Seconds an index may answer "no such chunk" (or ``head``) before it is revalidated.
DEFAULT_RECHECK_AFTER = 1.0


@dataclass(slots=True)
class Routed(Generic[C]):
    """Keys of one call sorted by where they go: ``plain`` (pass-through, positions in
    the call), ``by_shard`` (``{shard key: [(position, chunk), ...]}``) and ``outside``
    (positions of chunk keys outside the dataset)."""

    plain: list[int] = field(default_factory=list)
    by_shard: dict[str, list[tuple[int, C]]] = field(default_factory=dict)
    outside: list[int] = field(default_factory=list)


class ShardedAdapter(WrapperStore, Generic[C]):
    """A Store whose chunk keys are the chunks of a sharded dataset in ``inner``.

    Args:
        inner: the store holding the shards (and everything else, passed through).
        fmt: the format's strategy.
        cache: where decoded indexes are kept (default: the process-wide cache).
        recheck_after: seconds an index may answer without a data read confirming it
            ("no such chunk", ``head``, a data-cache hit) before it is revalidated (one
            ``head`` of the shard); ``0``: always.
        data_cache: keep chunk bytes (decoded) here, keyed by shard version: a repeated
            read within ``recheck_after`` costs no request. Off by default; a store with
            a data cache reads through the batch path only (the lean path is off).
        lean_reads: the first single read of an event-loop tick whose indexes are cached
            is sent at once, alone (least CPU); ``False`` batches it with the reads that
            follow it in the tick (fewest requests, for callers that read in bursts).
    """

    def __init__(
        self,
        inner: Store,
        fmt: ShardFormat[C, Any],
        *,
        cache: LoadingCache | None = None,
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: LoadingCache | None = None,
        lean_reads: bool = True,
    ) -> None:
        super().__init__(inner)
        self.format = fmt
        self.cache = cache if cache is not None else default_cache()
        self.indexes = ShardIndexes(inner, fmt, self.cache, recheck_after)
        self.reads = ShardReads(self.indexes, data_cache, lean_reads)
        self.writes = ShardWrites(self.indexes)
        self.listing = ShardListing(self.indexes)

    @property
    def recheck_after(self) -> float:
        return self.indexes.recheck_after

    @property
    def data_cache(self) -> LoadingCache | None:
        return self.reads.data_cache

    @property
    def lean_reads(self) -> bool:
        return self.reads.lean_reads

    # -- routing --------------------------------------------------------------------------

    def _inner_key(self, key: str) -> str:
        return self.format.inner_key(key)

    def _outer_key(self, inner_key: str) -> str | None:
        return self.format.outer_key(inner_key)

    def route(self, keys: Sequence[str]) -> Routed[C]:
        """Sort the (validated) keys of one call by where they go."""
        routed: Routed[C] = Routed()
        for i, loc in enumerate(self.format.locate_many(keys)):
            if loc is None:
                routed.plain.append(i)
            elif not loc.inside:
                routed.outside.append(i)
            else:
                routed.by_shard.setdefault(loc.shard_key, []).append((i, loc.chunk))
        return routed

    def forget_cached(self) -> None:
        """Drop this adapter's cached indexes and the shards it kept; the wrapped store
        stays open (for whoever owns it, such as a view)."""
        self.indexes.forget_all()

    async def _close(self) -> None:
        self.forget_cached()  # its indexes and kept shards: nobody asks for them again
        await super()._close()

    def _pass_through(self, key: str) -> str:
        """A pass-through key's key in the wrapped store; a raw write or delete of a shard
        object drops its cached index."""
        inner_key = self.format.inner_key(key)
        if self.format.is_shard(inner_key):
            self.indexes.forget(inner_key)
        return inner_key

    def _writable(self, key: str) -> Location[C] | None:
        loc = self.format.locate(key)
        if loc is not None and not loc.inside:
            raise InvalidKeyError(f"{key!r} names a chunk outside the {self.format.kind} dataset")
        return loc

    def _writable_routes(self, keys: Sequence[str]) -> Routed[C]:
        """:meth:`route` for writes: a chunk outside the dataset is an ``InvalidKeyError``
        (before anything is written)."""
        routed = self.route(keys)
        if routed.outside:
            self._writable(keys[routed.outside[0]])
        return routed

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        loc = self.format.locate(key)
        if loc is None:
            return await super()._get(key, byte_range, if_match)
        return await self._read_chunk(key, loc, byte_range, if_match)

    async def _get_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """The bytes alone: a passed-through key is the wrapped store's ``get`` (one
        completion on cloud stores, where ``get_object`` takes two)."""
        loc = self.format.locate(key)
        if loc is None:
            return await self.inner.get(self._inner_key(key), byte_range)
        result = await self._read_chunk(key, loc, byte_range, None)
        return None if result is None else result.data

    async def _read_chunk(
        self, key: str, loc: Location[C], byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """One chunk read (``None``: outside the array or absent)."""
        if not loc.inside:
            return None
        return await self.reads.read_one(
            ChunkRead(key, loc.shard_key, loc.chunk, byte_range, if_match)
        )

    async def get_partial_values(
        self,
        key_ranges: Iterable[tuple[str, ByteRange | None]],
        *,
        if_match: Mapping[str, str] | None = None,
    ) -> builtins.list[Data | None]:
        """Read chunks and pass-through keys; see :meth:`Store.get_partial_values`."""
        items = [(validate_key(k), r) for k, r in key_ranges]
        self._count("get", (k for k, _ in items))
        versions = if_match or {}
        routed = self.route([k for k, _ in items])
        out: list[Data | None] = [None] * len(items)

        async def read_plain() -> None:
            if not routed.plain:
                return
            keys = [(self.format.inner_key(items[i][0]), items[i][1]) for i in routed.plain]
            inner_versions = {
                inner: versions[items[i][0]]
                for i, (inner, _) in zip(routed.plain, keys, strict=True)
                if items[i][0] in versions
            }
            values = await self.inner.get_partial_values(keys, if_match=inner_versions or None)
            for i, value in zip(routed.plain, values, strict=True):
                out[i] = value

        async def read_chunks() -> None:
            where = [(i, s, c) for s, members in routed.by_shard.items() for i, c in members]
            reads = [
                ChunkRead(items[i][0], s, c, items[i][1], versions.get(items[i][0]))
                for i, s, c in where
            ]
            results = await self.reads.read_many(reads)
            for (i, _, _), result in zip(where, results, strict=True):
                out[i] = None if result is None else result.data

        await asyncio.gather(read_plain(), read_chunks())
        self.stats.bytes_returned += sum(len(v) for v in out if v is not None)
        return out

    async def get_located(self, chunks: Sequence[tuple[str, str, C]]) -> builtins.list[Data | None]:
        """Whole chunks whose place the caller knows: ``(key, shard key, chunk)`` each,
        as :meth:`route` would find them (a converter planning by grid coordinates);
        read as :meth:`get_partial_values` reads chunks, without parsing their keys."""
        self._count("get", (k for k, _, _ in chunks))
        reads = [ChunkRead(k, s, c, None, None) for k, s, c in chunks]
        out = [None if r is None else r.data for r in await self.reads.read_many(reads)]
        self.stats.bytes_returned += sum(len(v) for v in out if v is not None)
        return out

    async def _head(self, key: str) -> ObjectMeta | None:
        loc = self.format.locate(key)
        if loc is None:
            return await super()._head(key)
        if not loc.inside:
            return None
        return await self.reads.head(ChunkRead(key, loc.shard_key, loc.chunk, None, None))

    # -- writes ---------------------------------------------------------------------------

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        loc = self._writable(key)
        if loc is None:
            self._pass_through(key)
            return await super()._set(key, data, if_match, if_absent)
        conditional = if_match is not None or if_absent
        value = bytes(data)
        change = if_version(key, value, if_match, if_absent) if conditional else constant(value)
        return await self.writes.submit(
            key, loc.shard_key, loc.chunk, change, conditional=conditional
        )

    async def set_values(self, values: Mapping[str, BytesLike]) -> None:
        """Write many chunks (and pass-through keys) at once, one write per shard.

        A shard whose every chunk is given is built without reading. When a shard fails,
        the others still finish before this raises :class:`~asyncshard.errors.
        PartialWriteError` (or the error itself when only one object was involved).
        """
        keys = [validate_key(k) for k in values]
        routed = self._writable_routes(keys)
        self._count_writes(values.items())
        jobs: list[Job] = [
            ([keys[i]], self.inner.set(self._pass_through(keys[i]), values[keys[i]]))
            for i in routed.plain
        ]
        triples = {
            s: [(keys[i], c, values[keys[i]]) for i, c in members]
            for s, members in routed.by_shard.items()
        }
        await run_writes(jobs + self.writes.chunk_writes(triples))

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (one read-merge-write per shard) or plain objects."""
        triples = [(validate_key(k), s, v) for k, s, v in key_start_values]
        for key, start, _ in triples:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
        keys = list(dict.fromkeys(k for k, _, _ in triples))
        routed = self._writable_routes(keys)
        self._count_writes((k, v) for k, _, v in triples)
        runs: dict[str, list[tuple[int, BytesLike]]] = {}
        for key, start, value in triples:
            runs.setdefault(key, []).append((start, value))
        jobs: list[Job] = []
        if routed.plain:
            plain = [keys[i] for i in routed.plain]
            inner = {k: self._pass_through(k) for k in plain}
            inner_runs = [(inner[k], s, v) for k, s, v in triples if k in inner]
            jobs.append((plain, self.inner.set_partial_values(inner_runs)))
        for shard_key, members in routed.by_shard.items():
            changes = [(chunk, patcher(runs[keys[i]])) for i, chunk in members]
            jobs.append(([keys[i] for i, _ in members], self.writes.apply(shard_key, changes)))
        await run_writes(jobs)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (a shard left empty is deleted) and pass-through keys.

        Keys naming chunks outside the dataset hold nothing and are ignored.
        """
        keys = [validate_key(k) for k in keys]
        self._count("delete", keys)
        routed = self.route(keys)
        plain = [self._pass_through(keys[i]) for i in routed.plain]
        if not plain and len(routed.by_shard) == 1:
            [(shard_key, members)] = routed.by_shard.items()
            if len(members) == 1 and not self.format.is_whole(shard_key, [members[0][1]]):
                # one chunk: joins the concurrent writes of its shard (one shard write)
                i, chunk = members[0]
                await self.writes.submit(keys[i], shard_key, chunk, erase, conditional=False)
                return
        by_shard = {s: [(keys[i], c) for i, c in m] for s, m in routed.by_shard.items()}
        await run_writes(self.writes.chunk_erases(by_shard, plain))

    async def _erase(self, key: str) -> None:
        await self.erase_values([key])

    async def _erase_if_match(self, key: str, version: str) -> None:
        loc = self._writable(key)
        if loc is None:
            self._pass_through(key)
            await super()._erase_if_match(key, version)
            return
        await self.writes.apply(loc.shard_key, [(loc.chunk, if_version(key, None, version))])

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix``; a prefix holding every chunk deletes
        the shards directly (no index reads)."""
        prefix = validate_prefix(prefix)
        if self.format.holds_every_chunk(prefix):
            # the same string prefix in the wrapped store: every shard, and nothing else
            # that does not start with it (list_source may be wider: never used here)
            await self.inner.erase_prefix(self.format.inner_key(prefix))
            self.forget_cached()
            return
        await self.erase_values([k async for k in self.list_prefix(prefix)])

    # -- listing --------------------------------------------------------------------------

    def _list(self, prefix: str) -> AsyncIterator[str]:
        return self.listing.keys(prefix)

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        if self.format.walks(prefix):
            return await super(WrapperStore, self)._list_dir(prefix)
        keys, prefixes = await self.listing.folder(prefix)
        return split_dir(prefix, keys, prefixes)
