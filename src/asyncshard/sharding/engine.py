"""ShardedAdapter: the one sharding engine, whatever the format.

A :class:`ShardedAdapter` is a Store wrapping the store that holds the shards. Its
:class:`ShardFormat` (the format's strategy, ``zarr.py`` and ``precomputed.py``) says
which keys are chunks and in which shard they live (``locate``), how to find chunks
through the shard's cached indexes (``find``), how to split and build whole shards, and
how chunk bytes are stored. Everything else is here, once:

* **Reads**: concurrent single reads submitted in one event-loop tick are batched per
  shard (:class:`~asyncshard.sharding.batching.Batcher`); a batch looks its chunks up
  through the cached indexes and reads their bytes in one coalesced round on the wrapped
  store. Every in-bounds chunk of an uncached shard asked at once: one whole-object read.
* **Staleness**: data reads are conditioned on the version of the index they used, so a
  rewritten shard is noticed by the read itself: the index is dropped and the read runs
  again (at most :data:`STALE_RETRIES` times; a shard that keeps changing is then read
  whole, which is one consistent snapshot). Answers not checked by a data read ("no such
  chunk", ``head``) come from an index at most ``recheck_after`` seconds old: an older
  index is revalidated first, one ``head`` of the shard per window (single-flight).
* **Writes**: a read-merge-write of the whole shard under a conditional write, retried on
  conflict (:func:`~asyncshard.sharding.common.read_merge_write`); concurrent writes to
  one shard in one tick (``set``, and ``erase_values`` of a single chunk) are merged into
  one shard write; a write covering every chunk
  of a shard builds it without reading. A caller's condition (``if_match``,
  ``if_absent``) is checked per chunk and fails only that chunk. A write of several
  shards waits for all of them before it returns or raises
  (:func:`~asyncshard.fanout.settle`).
* **Listing**: chunk keys from the shard indexes (one index read per shard, cached).

Keys that are not chunks pass through to the wrapped store (``ShardFormat.inner_key``).
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import time
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from asyncshard.cache import CacheEntry, IndexCache, default_cache
from asyncshard.errors import ConflictError, CorruptShardError, FormatError, InvalidKeyError
from asyncshard.fanout import settle
from asyncshard.ranges import ByteRange, Range, resolve
from asyncshard.sharding.batching import Batcher
from asyncshard.sharding.common import UNCHANGED, Unchanged, new_namespace, read_merge_write
from asyncshard.store import (
    BytesLike,
    Data,
    GetResult,
    ObjectMeta,
    apply_runs,
    check_condition,
    split_dir,
    validate_key,
    validate_prefix,
)
from asyncshard.wrapper import WrapperStore

__all__ = [
    "DEFAULT_RECHECK_AFTER",
    "MISS",
    "STALE_RETRIES",
    "Chunk",
    "ChunkRead",
    "Current",
    "Found",
    "IndexIO",
    "Location",
    "Miss",
    "ShardFormat",
    "ShardedAdapter",
]

#: A chunk's identity within its shard: a position tuple (Zarr), a chunk id (precomputed);
#: hashable. ``Any`` so that each format names its own type.
Chunk: TypeAlias = Any
#: Seconds an index may answer "no such chunk" (or ``head``) before it is revalidated.
DEFAULT_RECHECK_AFTER = 1.0
#: Reads retried with a fresh index before a shard that keeps changing is read whole.
STALE_RETRIES = 3
#: Decoded chunk bytes up to which decoding runs on the event loop (else in a thread).
INLINE_DECODE_NBYTES = 1 << 20
#: Worst-case deflate expansion: output bytes per input byte.
_DEFLATE_RATIO = 1032


@dataclass(frozen=True, slots=True)
class Location:
    """Where a chunk key lives: the shard's key in the wrapped store and the chunk's
    identity in it. ``inside=False``: the key has a chunk's form but lies outside the
    dataset (reads find nothing there, writes are refused)."""

    shard_key: str
    chunk: Chunk
    inside: bool = True


@dataclass(frozen=True, slots=True)
class Found:
    """What a shard's cached indexes say about some chunks.

    ``entries`` maps each present chunk to its absolute ``[start, end)`` in the shard;
    ``loaded_at`` is when the index behind the answer was loaded or last confirmed.
    """

    exists: bool
    version: str | None
    entries: Mapping[Chunk, tuple[int, int]]
    loaded_at: float


class Current:
    """A chunk's stored value during a read-merge-write; decoded only when asked."""

    __slots__ = ("_chunk", "_format", "_shard_key", "stored", "version")

    def __init__(
        self,
        stored: BytesLike | None,
        version: str | None,
        fmt: ShardFormat,
        shard_key: str,
        chunk: Chunk,
    ) -> None:
        self.stored = stored
        self.version = version
        self._format = fmt
        self._shard_key = shard_key
        self._chunk = chunk

    @property
    def exists(self) -> bool:
        return self.stored is not None

    def value(self) -> Data | None:
        """The chunk's raw bytes (decoded), ``None`` when it does not exist."""
        if self.stored is None:
            return None
        return self._format.decode(self.stored, self._shard_key, self._chunk)


#: A change to one chunk: its current value -> new raw bytes, or ``None`` to erase it.
#: Raising ``ConflictError`` (a caller's condition) fails this change alone.
Change = Callable[[Current], BytesLike | None]


class IndexIO(ABC):
    """What a format's index code may use: the wrapped store and the index cache."""

    @property
    @abstractmethod
    def store(self) -> Any:
        """The wrapped store (typed ``Store``; ``Any`` keeps formats free of I/O imports)."""

    @abstractmethod
    async def cached(
        self, name: tuple[Hashable, ...], load: Callable[[], Awaitable[CacheEntry]]
    ) -> CacheEntry:
        """The cache entry ``name`` of this adapter, loaded once by ``load`` on a miss."""

    @abstractmethod
    def put(self, name: tuple[Hashable, ...], value: Any, version: str | None, nbytes: int) -> None:
        """Cache ``value`` under ``name`` (an index decoded from bytes already at hand)."""

    @abstractmethod
    def peek(self, name: tuple[Hashable, ...]) -> CacheEntry | None:
        """The cache entry ``name`` if it is cached (no I/O)."""


class ShardFormat(ABC):
    """A sharded format's strategy: keys, index lookups, shard codecs.

    Subclasses implement the abstract methods; the rest have pass-through defaults.
    Index lookups go through the :class:`IndexIO` the engine passes in.
    """

    #: Name of the format (cache namespaces, messages).
    kind: ClassVar[str]
    #: Whether stored chunk bytes are an encoding of the raw bytes (``decode`` needed;
    #: byte ranges of a chunk are then cut from the decoded bytes).
    encoded: bool = False

    # -- keys -------------------------------------------------------------------------

    @abstractmethod
    def locate(self, key: str) -> Location | None:
        """The chunk ``key`` names, or ``None`` when it is not a chunk key (pass-through)."""

    def locate_many(self, keys: Sequence[str]) -> list[Location | None]:
        """:meth:`locate` for many keys (formats may vectorise)."""
        return [self.locate(k) for k in keys]

    def inner_key(self, key: str) -> str:
        """The wrapped store's key of a pass-through key (or of a listing prefix)."""
        return key

    def outer_key(self, inner_key: str) -> str | None:
        """The adapter's key of a wrapped store's key, ``None`` if it is not visible."""
        return inner_key

    @abstractmethod
    def is_shard(self, inner_key: str) -> bool:
        """Whether a key of the wrapped store is one of this dataset's shards."""

    def shadows(self, key: str) -> bool:
        """Whether a pass-through object at ``key`` is hidden by a chunk of that name."""
        return self.locate(key) is not None

    def is_whole(self, shard_key: str, chunks: Collection[Chunk]) -> bool:
        """Whether ``chunks`` are every chunk the shard can hold (write it without reading)."""
        return False

    # -- indexes ----------------------------------------------------------------------

    def index_name(self, shard_key: str) -> tuple[Hashable, ...]:
        """Cache name of the shard's top-level index (dropped when the shard changes)."""
        return ("index", shard_key)

    def lookup(
        self, io: IndexIO, shard_key: str, index: Any, chunk: Chunk
    ) -> tuple[int, int] | Miss | None:
        """Where ``chunk`` lies according to the shard's cached indexes alone (``index`` is
        the top-level one), without I/O: ``(start, end)``, ``None`` when absent, or
        :data:`MISS` when an index level is not cached (the engine's lean single-read path
        then steps aside for the batch path)."""
        return MISS

    @abstractmethod
    async def find(self, io: IndexIO, shard_key: str, chunks: Sequence[Chunk]) -> Found:
        """Look ``chunks`` up in the shard's indexes (cached through ``io``).

        Reads of deeper index levels are conditioned on the top-level index's version; a
        changed shard raises ``ConflictError`` whose ``key`` is ``shard_key``.
        """

    @abstractmethod
    def remember(self, io: IndexIO, shard_key: str, shard: memoryview, version: str) -> None:
        """Cache the index of a shard whose bytes are at hand (just read or written)."""

    @abstractmethod
    async def chunks_in(self, io: IndexIO, shard_key: str) -> list[Chunk]:
        """Every chunk stored in the shard (indexes through ``io``); ``[]`` if it is gone."""

    # -- shards -----------------------------------------------------------------------

    @abstractmethod
    def split(self, shard_key: str, shard: memoryview) -> dict[Chunk, memoryview]:
        """Every chunk of a whole shard (still encoded), validated."""

    @abstractmethod
    def build(self, shard_key: str, chunks: Mapping[Chunk, BytesLike]) -> bytes:
        """A whole shard from stored (encoded) chunk bytes; ``chunks`` is not empty."""

    @abstractmethod
    def empty_shard(self) -> bytes:
        """A shard holding no chunks (written where a conditional delete is impossible)."""

    def encode(self, raw: BytesLike) -> BytesLike:
        """A chunk's stored bytes from its raw bytes."""
        return raw

    def decode(self, stored: BytesLike, shard_key: str, chunk: Chunk) -> Data:
        """A chunk's raw bytes from its stored bytes (bounded by :meth:`decoded_limit`)."""
        return stored if isinstance(stored, bytes | memoryview) else bytes(stored)

    def decoded_limit(self, chunk: Chunk) -> int:
        """The largest raw size a stored chunk may decode to."""
        return 1 << 62

    # -- listing ----------------------------------------------------------------------

    @abstractmethod
    def chunk_key(self, shard_key: str, chunk: Chunk) -> str | None:
        """The adapter's key of a stored chunk, ``None`` when it is no chunk of the dataset."""

    def list_source(self, prefix: str) -> str:
        """The wrapped store's prefix to list for the adapter's keys starting with ``prefix``."""
        return self.inner_key(prefix)

    def walks(self, folder: str) -> bool:
        """Whether chunk keys lie in sub-folders of ``folder`` through shards elsewhere, so
        that ``list_dir(folder)`` must walk; otherwise one listing of the folder serves."""
        return False

    def holds_every_chunk(self, prefix: str) -> bool:
        """Whether every chunk key starts with ``prefix`` (``erase_prefix`` deletes shards)."""
        return prefix == ""

    def is_chunk_folder(self, folder: str) -> bool:
        """Whether ``folder`` (``""`` or ending in ``/``) is a folder of chunk keys, which
        exists while the dataset does (for listings that do not enumerate chunks)."""
        return folder == ""


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """One chunk read: the key it is reported under, its location, range and condition."""

    key: str
    shard_key: str
    chunk: Chunk
    rng: ByteRange | None
    if_match: str | None


@dataclass(frozen=True, slots=True)
class _Write:
    key: str
    shard_key: str
    chunk: Chunk
    change: Change
    conditional: bool


class Miss(enum.Enum):
    """The type of :data:`MISS`."""

    MISS = "miss"


#: "Cannot tell without I/O": the lean read path steps aside for the batch path.
MISS = Miss.MISS


#: One read's outcome inside the engine: its result, or the error that failed it alone
#: (a chunk that does not decode fails its own read, not its batch's).
Outcome = GetResult | FormatError | None


def _raised(outcome: Outcome) -> GetResult | None:
    if isinstance(outcome, FormatError):
        raise outcome
    return outcome


class _Stale(Exception):
    """A data read conditioned on a cached index found its shard changed or gone."""

    def __init__(self, shard_key: str) -> None:
        super().__init__(shard_key)
        self.shard_key = shard_key


def _constant(value: BytesLike) -> Change:
    return lambda _current: value


def _erase(_current: Current) -> None:
    return None


def _patcher(runs: Sequence[tuple[int, BytesLike]]) -> Change:
    return lambda current: apply_runs(current.value(), runs)


def _conditioned(key: str, value: BytesLike, if_match: str | None, if_absent: bool) -> Change:
    def change(current: Current) -> BytesLike:
        meta = ObjectMeta(key, 0, current.version) if current.exists else None
        check_condition(key, meta, if_match, if_absent)
        return value

    return change


class ShardedAdapter(WrapperStore, IndexIO):
    """A Store whose chunk keys are the chunks of a sharded dataset in ``inner``.

    Args:
        inner: the store holding the shards (and everything else, passed through).
        fmt: the format's strategy.
        cache: where decoded indexes are kept (default: the process-wide cache).
        recheck_after: seconds an index may answer without a data read confirming it
            ("no such chunk", ``head``, a data-cache hit) before it is revalidated (one
            ``head`` of the shard); ``0``: always.
        data_cache: keep chunk bytes (decoded) here, keyed by shard version: a repeated
            read within ``recheck_after`` costs no request. Off by default.
        lean_reads: the first single read of an event-loop tick whose indexes are cached
            is sent at once, alone (least CPU); ``False`` batches it with the reads that
            follow it in the tick (fewest requests, for callers that read in bursts).
    """

    def __init__(
        self,
        inner: Any,
        fmt: ShardFormat,
        *,
        cache: IndexCache | None = None,
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: IndexCache | None = None,
        lean_reads: bool = True,
    ) -> None:
        super().__init__(inner)
        if recheck_after < 0:
            raise ValueError("recheck_after must be >= 0")
        self.format = fmt
        self.cache = cache if cache is not None else default_cache()
        self.recheck_after = recheck_after
        self.data_cache = data_cache
        self.lean_reads = lean_reads
        self._ns = new_namespace(fmt.kind)
        self._reads: Batcher[ChunkRead, GetResult | None] = Batcher(
            self._read_shard, lambda read: read.shard_key
        )
        self._writes: Batcher[_Write, str | None] = Batcher(
            self._write_shard, lambda write: write.shard_key, settle_on_cancel=True
        )
        self._rechecks: dict[str, asyncio.Task[bool]] = {}
        self._lean_tick = False

    # -- IndexIO --------------------------------------------------------------------------

    @property
    def store(self) -> Any:
        return self.inner

    async def cached(
        self, name: tuple[Hashable, ...], load: Callable[[], Awaitable[CacheEntry]]
    ) -> CacheEntry:
        return await self.cache.get((self._ns, *name), load)

    def put(self, name: tuple[Hashable, ...], value: Any, version: str | None, nbytes: int) -> None:
        self.cache.put((self._ns, *name), value, version, nbytes)

    def peek(self, name: tuple[Hashable, ...]) -> CacheEntry | None:
        return self.cache.peek((self._ns, *name))

    def _forget(self, shard_key: str) -> None:
        """Drop a shard's top-level index (deeper entries are keyed by its version)."""
        self.cache.invalidate((self._ns, *self.format.index_name(shard_key)))

    def _remember(self, shard_key: str, shard: BytesLike, version: str | None) -> None:
        """Cache the index of a shard at hand; without a version (a later rewrite could not
        be noticed) forget it instead."""
        if version is None:
            self._forget(shard_key)
        else:
            self.format.remember(self, shard_key, memoryview(shard), version)

    # -- routing --------------------------------------------------------------------------

    def _inner_key(self, key: str) -> str:
        return self.format.inner_key(key)

    def _outer_key(self, inner_key: str) -> str | None:
        return self.format.outer_key(inner_key)

    def _pass_through(self, key: str) -> None:
        """Before a pass-through write or delete: a raw write to a shard object drops its
        cached index."""
        inner_key = self.format.inner_key(key)
        if self.format.is_shard(inner_key):
            self._forget(inner_key)

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        loc = self.format.locate(key)
        if loc is None:
            return await super()._get(key, byte_range, if_match)
        if not loc.inside:
            return None
        return await self._read_one(ChunkRead(key, loc.shard_key, loc.chunk, byte_range, if_match))

    async def get_located(
        self,
        key: str,
        loc: Location,
        byte_range: ByteRange | None = None,
        *,
        if_match: str | None = None,
    ) -> GetResult | None:
        """:meth:`get_object` of a chunk key whose :class:`Location` the caller already
        has (from ``format.locate(key)``, e.g. a view that routed it): no second parse."""
        self.stats.requests["get"] += 1
        result: GetResult | None = None
        if loc.inside:
            read = ChunkRead(key, loc.shard_key, loc.chunk, byte_range, if_match)
            result = await self._read_one(read)
        if result is not None:
            self.stats.bytes_returned += len(result.data)
        return result

    async def _read_one(self, read: ChunkRead) -> GetResult | None:
        """One chunk read: the lean path when it applies, else a batch with the reads of
        the same tick (a read with a caller's condition runs alone: it may fail)."""
        if read.if_match is not None:
            [result] = await self._read_shard([read])
            return _raised(result)
        if self.lean_reads and not self._reads.pending() and not self._lean_tick:
            # the first read of this tick: the lean path (the next ones of the same tick
            # are batched, since they may share a shard and a request)
            self._lean_tick = True
            asyncio.get_running_loop().call_soon(self._end_lean_tick)
            direct = await self._read_warm(read)
            if not isinstance(direct, Miss):
                return direct
        return await self._reads.submit(read)

    def _end_lean_tick(self) -> None:
        self._lean_tick = False

    async def _read_warm(self, read: ChunkRead) -> GetResult | Miss | None:
        """One chunk whose shard index is cached and recent: one conditioned range read,
        no batch, no task. ``MISS`` when that does not apply (then the batch path runs)."""
        fmt = self.format
        if fmt.encoded or self.data_cache is not None:
            return MISS
        entry = self.cache.peek((self._ns, *fmt.index_name(read.shard_key)))
        if entry is None or entry.missing or entry.version is None:
            return MISS
        where = fmt.lookup(self, read.shard_key, entry.value, read.chunk)
        if isinstance(where, Miss):
            return MISS
        if where is None:  # no such chunk: trusted only from a recent index
            if time.monotonic() - entry.loaded_at > self.recheck_after:
                return MISS
            return None
        start, end = where
        a, b = resolve(read.rng, end - start)
        try:
            got = await self.inner.get_object(
                read.shard_key, Range(start + a, start + b), if_match=entry.version
            )
        except ConflictError:  # the shard changed: the batch path refreshes the index
            self._forget(read.shard_key)
            return MISS
        if got is None:
            self._forget(read.shard_key)
            return MISS
        if len(got.data) != b - a:
            self._forget(read.shard_key)
            raise CorruptShardError(
                f"chunk bytes [{start + a}, {start + b}) lie past the end of the shard",
                key=read.shard_key,
            )
        return GetResult(got.data, ObjectMeta(read.key, end - start, entry.version))

    async def get_partial_values(
        self,
        key_ranges: Iterable[tuple[str, ByteRange | None]],
        *,
        if_match: Mapping[str, str] | None = None,
    ) -> builtins.list[Data | None]:
        """Read chunks and pass-through keys; see :meth:`Store.get_partial_values`."""
        items = [(validate_key(k), r) for k, r in key_ranges]
        self._count("get", (k for k, _ in items))
        out: list[Data | None] = [None] * len(items)
        plain: list[int] = []
        chunk_reads: list[tuple[int, ChunkRead]] = []
        for i, ((key, rng), loc) in enumerate(
            zip(items, self.format.locate_many([k for k, _ in items]), strict=True)
        ):
            if loc is None:
                plain.append(i)
            elif loc.inside:
                version = if_match.get(key) if if_match else None
                chunk_reads.append((i, ChunkRead(key, loc.shard_key, loc.chunk, rng, version)))

        async def read_plain() -> None:
            if not plain:
                return
            keys = [(self.format.inner_key(items[i][0]), items[i][1]) for i in plain]
            versions = None
            if if_match:
                versions = {
                    self.format.inner_key(items[i][0]): if_match[items[i][0]]
                    for i in plain
                    if items[i][0] in if_match
                }
            values = await self.inner.get_partial_values(keys, if_match=versions)
            for i, value in zip(plain, values, strict=True):
                out[i] = value

        async def read_chunks() -> None:
            results = await self._read_many([read for _, read in chunk_reads])
            for (i, _), result in zip(chunk_reads, results, strict=True):
                out[i] = None if result is None else result.data

        await asyncio.gather(read_plain(), read_chunks())
        for value in out:
            if value is not None:
                self.stats.bytes_returned += len(value)
        return out

    async def _read_many(self, reads: Sequence[ChunkRead]) -> list[GetResult | None]:
        """:meth:`_read_group` for reads of any shards; a failed read raises its error."""
        return [_raised(o) for o in await self._read_group(reads)]

    async def _read_group(self, reads: Sequence[ChunkRead]) -> list[Outcome]:
        """Read chunks of any shards: one batch per shard, concurrently, results in order."""
        by_shard: dict[str, list[int]] = {}
        for i, read in enumerate(reads):
            by_shard.setdefault(read.shard_key, []).append(i)
        out: list[Outcome] = [None] * len(reads)

        async def one(members: list[int]) -> None:
            results = await self._read_shard([reads[i] for i in members])
            for i, result in zip(members, results, strict=True):
                out[i] = result

        await asyncio.gather(*(one(m) for m in by_shard.values()))
        return out

    async def _read_shard(self, reads: Sequence[ChunkRead]) -> list[Outcome]:
        """Read chunks of one shard: indexes (cached), then one coalesced data round.

        A stale index is dropped and the read runs again; a shard that keeps changing is
        read whole after :data:`STALE_RETRIES` retries (one consistent snapshot).
        """
        shard_key = reads[0].shard_key
        if len(reads) == 1 and reads[0].if_match is None:  # a batch of one: lean if warm
            direct = await self._read_warm(reads[0])
            if not isinstance(direct, Miss):
                return [direct]
        for _ in range(STALE_RETRIES + 1):
            try:
                return await self._read_shard_once(shard_key, reads)
            except _Stale:
                self._forget(shard_key)
        return await self._read_whole(shard_key, reads)

    async def _read_shard_once(self, shard_key: str, reads: Sequence[ChunkRead]) -> list[Outcome]:
        fmt = self.format
        chunks = list(dict.fromkeys(r.chunk for r in reads))
        if self.cache.peek((self._ns, *fmt.index_name(shard_key))) is None and fmt.is_whole(
            shard_key, chunks
        ):
            return await self._read_whole(shard_key, reads)
        found = await self._find(shard_key, chunks, checked=False)
        hits = self._cached_data(shard_key, found, chunks)
        if len(found.entries) < len(chunks) or hits:  # answers from the index alone
            try:  # must come from a recent index
                rechecked = await self._recheck(shard_key, chunks, found)
            except ConflictError as exc:
                if exc.key != shard_key:
                    raise
                raise _Stale(shard_key) from None
            if rechecked is not found:
                found, hits = rechecked, self._cached_data(shard_key, rechecked, chunks)
        out: list[Outcome] = [None] * len(reads)
        fetch: list[tuple[int, Range, int]] = []
        for i, read in enumerate(reads):
            entry = found.entries.get(read.chunk)
            if entry is None:
                continue
            start, end = entry
            if read.if_match is not None:  # the caller's own condition: final
                meta = ObjectMeta(read.key, 0, found.version)
                check_condition(read.key, meta, read.if_match, False)
            cached = hits.get(read.chunk)
            if cached is not None:
                a, b = resolve(read.rng, len(cached))
                meta = ObjectMeta(read.key, len(cached), found.version)
                out[i] = GetResult(memoryview(cached)[a:b], meta)
                continue
            whole = fmt.encoded or self.data_cache is not None
            a, b = (0, end - start) if whole else resolve(read.rng, end - start)
            fetch.append((i, Range(start + a, start + b), end - start))
        if not fetch:
            return out
        versions = {shard_key: found.version} if found.version is not None else None
        try:
            data = await self.inner.get_partial_values(
                [(shard_key, rng) for _, rng, _ in fetch], if_match=versions
            )
        except ConflictError:  # only the shard version was a condition here
            raise _Stale(shard_key) from None
        decoded: dict[Chunk, Data] = {}
        for (i, rng, size), value in zip(fetch, data, strict=True):
            if value is None:  # deleted since its index was cached
                raise _Stale(shard_key)
            if len(value) != rng.end - rng.start:
                self._forget(shard_key)
                raise CorruptShardError(
                    f"chunk bytes [{rng.start}, {rng.end}) lie past the end of the shard",
                    key=shard_key,
                )
            read = reads[i]
            if not fmt.encoded and self.data_cache is None:  # the range asked, fetched
                out[i] = GetResult(value, ObjectMeta(read.key, size, found.version))
                continue
            raw = decoded.get(read.chunk)
            if raw is None:  # once per chunk, however often it was asked
                try:
                    raw = decoded[read.chunk] = await self._raw(read, value, found.version)
                except FormatError as exc:  # this chunk is corrupt, not its neighbours
                    out[i] = exc
                    continue
            a, b = resolve(read.rng, len(raw))
            out[i] = GetResult(memoryview(raw)[a:b], ObjectMeta(read.key, len(raw), found.version))
        return out

    def _cached_data(
        self, shard_key: str, found: Found, chunks: Sequence[Chunk]
    ) -> dict[Chunk, bytes]:
        """The chunks of ``found``'s shard version held by the data cache."""
        cache = self.data_cache
        if cache is None or found.version is None:
            return {}
        hits: dict[Chunk, bytes] = {}
        for chunk in chunks:
            if chunk in found.entries:
                entry = cache.peek((self._ns, "data", shard_key, found.version, chunk))
                if entry is not None:
                    hits[chunk] = entry.value
        return hits

    async def _raw(self, read: ChunkRead, stored: Data, version: str | None) -> Data:
        """A whole chunk's raw bytes from its stored bytes (decoded if the format encodes
        them), kept in the data cache when there is one."""
        fmt = self.format
        raw = await self._decode(stored, read.shard_key, read.chunk) if fmt.encoded else stored
        if self.data_cache is not None and version is not None:
            owned = raw if isinstance(raw, bytes) else bytes(raw)  # not a view of a big buffer
            name = (self._ns, "data", read.shard_key, version, read.chunk)
            self.data_cache.put(name, owned, version, len(owned))
            return owned
        return raw

    async def _decode(self, stored: BytesLike, shard_key: str, chunk: Chunk) -> Data:
        """Decode a chunk; work that may be large (by the format's limit and the worst
        expansion of the stored bytes) runs in a thread, off the event loop."""
        fmt = self.format
        bound = min(fmt.decoded_limit(chunk), len(stored) * _DEFLATE_RATIO)
        if bound <= INLINE_DECODE_NBYTES:
            return fmt.decode(stored, shard_key, chunk)
        return await asyncio.to_thread(fmt.decode, stored, shard_key, chunk)

    async def _read_whole(self, shard_key: str, reads: Sequence[ChunkRead]) -> list[Outcome]:
        """Read the whole shard in one unconditional request and cut the reads from it."""
        result = await self.inner.get_object(shard_key)
        if result is None:
            self._remember_missing(shard_key)
            return [None] * len(reads)
        view = memoryview(result.data)
        chunks = self.format.split(shard_key, view)
        version = result.meta.version
        self._remember(shard_key, view, version)
        out: list[Outcome] = []
        for read in reads:
            stored = chunks.get(read.chunk)
            if stored is None:
                out.append(None)
                continue
            if read.if_match is not None:
                check_condition(read.key, ObjectMeta(read.key, 0, version), read.if_match, False)
            try:
                raw = await self._raw(read, stored, version)
            except FormatError as exc:
                out.append(exc)
                continue
            a, b = resolve(read.rng, len(raw))
            out.append(GetResult(memoryview(raw)[a:b], ObjectMeta(read.key, len(raw), version)))
        return out

    def _remember_missing(self, shard_key: str) -> None:
        self.cache.put((self._ns, *self.format.index_name(shard_key)), None, None, 0)

    async def _find(self, shard_key: str, chunks: Sequence[Chunk], *, checked: bool) -> Found:
        """``format.find``; ``checked``: every answer (not only "no such chunk") must come
        from a recent index. A deeper index level found the shard changed: ``_Stale``."""
        try:
            found = await self.format.find(self, shard_key, chunks)
            if checked:
                found = await self._recheck(shard_key, chunks, found)
        except ConflictError as exc:
            if exc.key != shard_key:
                raise
            raise _Stale(shard_key) from None
        return found

    async def _recheck(self, shard_key: str, chunks: Sequence[Chunk], found: Found) -> Found:
        """``found``, or a fresh lookup when its index is older than ``recheck_after`` and
        the shard changed since (one ``head`` of the shard per window, single-flight)."""
        if time.monotonic() - found.loaded_at <= self.recheck_after and self.recheck_after > 0:
            return found
        task = self._rechecks.get(shard_key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.get_running_loop().create_task(self._unchanged(shard_key, found))
            self._rechecks[shard_key] = task
            task.add_done_callback(lambda t: self._drop_recheck(shard_key, t))
        if await asyncio.shield(task):
            return found
        return await self.format.find(self, shard_key, chunks)

    def _drop_recheck(self, shard_key: str, task: asyncio.Task[bool]) -> None:
        if self._rechecks.get(shard_key) is task:
            del self._rechecks[shard_key]

    async def _unchanged(self, shard_key: str, found: Found) -> bool:
        """Whether the shard is still what ``found`` says (then its index is touched)."""
        meta = await self.inner.head(shard_key)
        same = (meta is None and not found.exists) or (
            meta is not None
            and found.exists
            and found.version is not None
            and meta.version == found.version
        )
        name = (self._ns, *self.format.index_name(shard_key))
        entry = self.cache.peek(name)
        if same and entry is not None:
            self.cache.touch(name, entry)
        elif not same:
            self._forget(shard_key)
        return same

    async def _head(self, key: str) -> ObjectMeta | None:
        loc = self.format.locate(key)
        if loc is None:
            return await super()._head(key)
        if not loc.inside:
            return None
        read = ChunkRead(key, loc.shard_key, loc.chunk, None, None)
        if self.format.encoded:  # the raw size needs the data
            [outcome] = await self._read_shard([read])
            result = _raised(outcome)
            return None if result is None else result.meta
        for _ in range(STALE_RETRIES + 1):
            try:
                found = await self._find(loc.shard_key, [loc.chunk], checked=True)
                break
            except _Stale:
                self._forget(loc.shard_key)
        else:
            [outcome] = await self._read_whole(loc.shard_key, [read])
            result = _raised(outcome)
            return None if result is None else result.meta
        entry = found.entries.get(loc.chunk)
        return None if entry is None else ObjectMeta(key, entry[1] - entry[0], found.version)

    # -- writes ---------------------------------------------------------------------------

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        loc = self._writable(key)
        if loc is None:
            self._pass_through(key)
            return await super()._put(key, data, if_match, if_absent)
        conditional = if_match is not None or if_absent
        change = (
            _conditioned(key, bytes(data), if_match, if_absent)
            if conditional
            else (_constant(bytes(data)))
        )
        return await self._writes.submit(_Write(key, loc.shard_key, loc.chunk, change, conditional))

    def _writable(self, key: str) -> Location | None:
        loc = self.format.locate(key)
        if loc is not None and not loc.inside:
            raise InvalidKeyError(f"{key!r} names a chunk outside the {self.format.kind} dataset")
        return loc

    async def _write_shard(self, writes: Sequence[_Write]) -> list[str | BaseException | None]:
        """Apply concurrent writes of one shard in one shard write (submission order)."""
        shard_key = writes[0].shard_key
        chunks = {w.chunk for w in writes}
        unconditional = not any(w.conditional or w.change is _erase for w in writes)
        if unconditional and self.format.is_whole(shard_key, chunks):
            version = await self._write_whole(
                shard_key, {w.chunk: w.change(_NO_CURRENT) or b"" for w in writes}
            )
            return [version] * len(writes)
        version, failed = await self._update_shard(shard_key, [(w.chunk, w.change) for w in writes])
        return [failed.get(i, version) for i in range(len(writes))]

    async def _write_whole(self, shard_key: str, raw: Mapping[Chunk, BytesLike]) -> str | None:
        """Replace a shard by one built from ``raw`` chunks, without reading it."""
        shard = self.format.build(shard_key, {c: self.format.encode(v) for c, v in raw.items()})
        self._forget(shard_key)
        version = await self.inner.set(shard_key, shard)
        self._remember(shard_key, shard, version)
        return version

    async def _update_shard(
        self, shard_key: str, changes: Sequence[tuple[Chunk, Change]]
    ) -> tuple[str | None, dict[int, BaseException]]:
        """Read-merge-write one shard; returns its new version and the changes whose own
        conditions failed (by index; those changed nothing)."""
        fmt = self.format
        failed: dict[int, BaseException] = {}

        def rebuild(current: GetResult | None) -> BytesLike | Unchanged | None:
            failed.clear()
            version = None if current is None else current.meta.version
            chunks: dict[Chunk, BytesLike] = {}
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
            self._forget(shard_key)
            return fmt.build(shard_key, chunks) if chunks else None

        def written(shard: BytesLike | None, version: str | None) -> None:
            if shard is not None:
                self._remember(shard_key, shard, version)

        version = await read_merge_write(self.inner, shard_key, rebuild, written, fmt.empty_shard)
        return version, dict(failed)

    async def _apply(self, shard_key: str, changes: Sequence[tuple[Chunk, Change]]) -> None:
        """:meth:`_update_shard`, raising the first failed condition (none are set here)."""
        _, failed = await self._update_shard(shard_key, changes)
        if failed:
            raise next(iter(failed.values()))

    def _group(
        self, keys: Iterable[str]
    ) -> tuple[builtins.list[str], dict[str, builtins.list[tuple[str, Chunk]]]]:
        """Pass-through keys and ``{shard: [(key, chunk), ...]}`` of chunk keys;
        ``InvalidKeyError`` for a chunk outside the dataset (before anything is written)."""
        keys = [validate_key(k) for k in keys]
        plain: list[str] = []
        by_shard: dict[str, list[tuple[str, Chunk]]] = {}
        for key, loc in zip(keys, self.format.locate_many(keys), strict=True):
            if loc is None:
                plain.append(key)
            elif not loc.inside:
                raise InvalidKeyError(
                    f"{key!r} names a chunk outside the {self.format.kind} dataset"
                )
            else:
                by_shard.setdefault(loc.shard_key, []).append((key, loc.chunk))
        return plain, by_shard

    def _chunk_writes(
        self,
        by_shard: Mapping[str, Sequence[tuple[str, Chunk, BytesLike]]],
        *,
        replace: bool = False,
    ) -> list[tuple[Sequence[str], Awaitable[object]]]:
        """One job per shard writing ``(key, chunk, raw bytes)`` triples: a whole-shard
        write when they cover the shard (or ``replace``), else a read-merge-write."""
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = []
        for shard_key, members in by_shard.items():
            raw = {chunk: value for _, chunk, value in members}
            keys = [key for key, _, _ in members]
            if replace or self.format.is_whole(shard_key, raw.keys()):
                jobs.append((keys, self._write_whole(shard_key, raw)))
            else:
                changes = [(c, _constant(v)) for c, v in raw.items()]
                jobs.append((keys, self._apply(shard_key, changes)))
        return jobs

    async def set_values(self, values: Mapping[str, BytesLike]) -> None:
        """Write many chunks (and pass-through keys) at once, one write per shard.

        A shard whose every chunk is given is built without reading. When a shard fails,
        the others still finish before this raises :class:`~asyncshard.errors.
        PartialWriteError` (or the error itself when only one object was involved).
        """
        plain, by_shard = self._group(values)
        self.stats.requests["put"] += len(values)
        self.stats.bytes_written += sum(len(v) for v in values.values())
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = []
        for key in plain:
            self._pass_through(key)
            jobs.append(([key], self.inner.set(self.format.inner_key(key), values[key])))
        triples = {s: [(k, c, values[k]) for k, c in m] for s, m in by_shard.items()}
        await settle(jobs + self._chunk_writes(triples))

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (one read-merge-write per shard) or plain objects."""
        triples = list(key_start_values)
        for key, start, _ in triples:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
        plain, by_shard = self._group(k for k, _, _ in triples)
        self.stats.requests["put"] += len({k for k, _, _ in triples})
        self.stats.bytes_written += sum(len(v) for _, _, v in triples)
        runs: dict[str, list[tuple[int, BytesLike]]] = {}
        for key, start, value in triples:
            runs.setdefault(key, []).append((start, value))
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = []
        if plain:
            for key in plain:
                self._pass_through(key)
            inner_runs = [
                (self.format.inner_key(k), s, v) for k, s, v in triples if k in set(plain)
            ]
            jobs.append((plain, self.inner.set_partial_values(inner_runs)))
        for shard_key, members in by_shard.items():
            changes = [(chunk, _patcher(runs[key])) for key, chunk in dict(members).items()]
            jobs.append(([k for k, _ in members], self._apply(shard_key, changes)))
        await settle(jobs)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (a shard left empty is deleted) and pass-through keys.

        Keys naming chunks outside the dataset hold nothing and are ignored.
        """
        keys = [validate_key(k) for k in keys]
        self.stats.requests["delete"] += len(keys)
        plain: list[str] = []
        by_shard: dict[str, list[tuple[str, Chunk]]] = {}
        for key, loc in zip(keys, self.format.locate_many(keys), strict=True):
            if loc is None:
                plain.append(key)
            elif loc.inside:
                by_shard.setdefault(loc.shard_key, []).append((key, loc.chunk))
        for key in plain:
            self._pass_through(key)
        if not plain and len(by_shard) == 1:
            [(shard_key, members)] = by_shard.items()
            if len(members) == 1 and not self.format.is_whole(shard_key, [members[0][1]]):
                # one chunk: joins the concurrent writes of its shard (one shard write)
                key, chunk = members[0]
                await self._writes.submit(_Write(key, shard_key, chunk, _erase, False))
                return
        await settle(self._chunk_erases(by_shard, [self.format.inner_key(k) for k in plain]))

    def _chunk_erases(
        self, by_shard: Mapping[str, Sequence[tuple[str, Chunk]]], plain: Sequence[str] = ()
    ) -> list[tuple[Sequence[str], Awaitable[object]]]:
        """Jobs erasing chunks: shards losing every chunk are deleted directly (with the
        ``plain`` keys of the wrapped store, in one call), the others read-merge-written."""
        whole = [s for s, m in by_shard.items() if self.format.is_whole(s, {c for _, c in m})]
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = []
        if plain or whole:
            for shard_key in whole:
                self._forget(shard_key)
            keys = [*plain, *(k for s in whole for k, _ in by_shard[s])]
            jobs.append((keys, self.inner.erase_values([*plain, *whole])))
        for shard_key, members in by_shard.items():
            if shard_key not in whole:
                changes = [(chunk, _erase) for _, chunk in members]
                jobs.append(([k for k, _ in members], self._apply(shard_key, changes)))
        return jobs

    async def _delete(self, key: str) -> None:
        await self.erase_values([key])

    async def _delete_if_match(self, key: str, version: str) -> None:
        loc = self._writable(key)
        if loc is None:
            self._pass_through(key)
            await super()._delete_if_match(key, version)
            return

        def change(current: Current) -> None:
            check_condition(
                key, ObjectMeta(key, 0, current.version) if current.exists else None, version, False
            )

        await self._apply(loc.shard_key, [(loc.chunk, change)])

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix``; a prefix holding every chunk deletes
        the shards directly (no index reads)."""
        prefix = validate_prefix(prefix)
        if self.format.holds_every_chunk(prefix):
            # the same string prefix in the wrapped store: every shard, and nothing else
            # that does not start with it (list_source may be wider: never used here)
            await self.inner.erase_prefix(self.format.inner_key(prefix))
            self.cache.invalidate_namespace(self._ns)
            return
        await self.erase_values([k async for k in self.list_prefix(prefix)])

    # -- listing --------------------------------------------------------------------------

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        fmt = self.format
        shard_keys: list[str] = []
        async for inner_key in self.inner.list_prefix(fmt.list_source(prefix)):
            if fmt.is_shard(inner_key):
                shard_keys.append(inner_key)
                continue
            key = fmt.outer_key(inner_key)
            if key is not None and key.startswith(prefix) and not fmt.shadows(key):
                yield key
        for key in await self._expand(shard_keys):
            if key.startswith(prefix):
                yield key

    async def _expand(self, shard_keys: Sequence[str]) -> list[str]:
        """The chunk keys stored in the given shards."""
        keys = (self.format.chunk_key(s, c) for s, c in await self._expand_chunks(shard_keys))
        return [k for k in keys if k is not None]

    async def _expand_chunks(self, shard_keys: Sequence[str]) -> list[tuple[str, Chunk]]:
        """``(shard key, chunk)`` of every chunk stored in the given shards (indexes through
        the cache, at most the wrapped store's concurrency at a time)."""
        limit = asyncio.Semaphore(self.inner.max_concurrency)

        async def chunks_of(shard_key: str) -> list[Chunk]:
            async with limit:
                for _ in range(STALE_RETRIES + 1):
                    try:
                        return await self.format.chunks_in(self, shard_key)
                    except ConflictError as exc:
                        if exc.key != shard_key:
                            raise
                        self._forget(shard_key)
                # a shard that keeps changing: one whole, consistent read
                whole = await self.inner.get_object(shard_key)
                if whole is None:
                    return []
                return list(self.format.split(shard_key, memoryview(whole.data)))

        found = await asyncio.gather(*(chunks_of(s) for s in shard_keys))
        return [(s, c) for s, chunks in zip(shard_keys, found, strict=True) for c in chunks]

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        fmt = self.format
        if fmt.walks(prefix):
            return await super(WrapperStore, self)._list_dir(prefix)
        keys, prefixes = await self.inner.list_dir(fmt.inner_key(prefix))
        shards = [k for k in keys if fmt.is_shard(k)]
        plain = [
            key
            for key in (fmt.outer_key(k) for k in keys if not fmt.is_shard(k))
            if key is not None and not fmt.shadows(key)
        ]
        chunk_keys = await self._expand(shards)
        child_prefixes = (p for p in map(fmt.outer_key, prefixes) if p is not None)
        return split_dir(prefix, [*plain, *chunk_keys], child_prefixes)


class _NoCurrent(Current):
    """The "current value" handed to unconditional changes of a whole-shard write."""

    def __init__(self) -> None:
        self.stored = None
        self.version = None


_NO_CURRENT = _NoCurrent()
