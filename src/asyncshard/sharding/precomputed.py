"""Neuroglancer ``neuroglancer_uint64_sharded_v1`` on the sharding engine.

:class:`Uint64ShardedStore` presents the directory ``prefix`` of a wrapped store as the
unsharded directory it encodes: chunk ids (canonical decimal strings, ``0 <= id <
2**64``) in place of the ``<hex>.shard`` files, every other key of the directory
(``info``, unsharded files, sub-directories) passed through. Given a volume ``Scale``
(``names=``), chunks are named ``x0-x1_y0-y1_z0-z1`` instead, as an unsharded scale
names its files. Int-keyed methods (:meth:`~Uint64ShardedStore.get_chunks`,
:meth:`~Uint64ShardedStore.set_chunks`, ...) skip the keys.

:class:`PrecomputedFormat` supplies the two index levels: the shard index (one request
for all ``2**minishard_bits`` entries, cached) and the minishard indexes (cached per
shard version; read conditioned on it), so a cold chunk costs 3 requests and another
chunk of a cached minishard 1. gzip chunk data is decoded within a bound (a volume
chunk's byte size when known) and byte ranges are cut from the decoded bytes. Writes
merge by default: precomputed shards have no fixed set of ids, so only the caller knows
that a batch is a whole shard (:meth:`~Uint64ShardedStore.write_shards`).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import itertools
import math
import re
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from asyncshard.backends.registry import StoreLocation, keyword_names, split_options
from asyncshard.cache import CacheEntry, LoadingCache
from asyncshard.errors import ConflictError, CorruptShardError, InvalidMetadataError
from asyncshard.fanout import run_writes
from asyncshard.formats.health import ShardHealth
from asyncshard.formats.precomputed.shard import (
    DEFAULT_MAX_CHUNK_NBYTES,
    MinishardIndex,
    build_shard,
    check_placement,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    encode_chunk_data,
    inspect_shard,
    minishard_index_range,
    shard_index_nbytes,
    split_shard,
)
from asyncshard.formats.precomputed.spec import ShardingSpec, U64Array, as_uint64_array
from asyncshard.formats.precomputed.volume import Scale
from asyncshard.ranges import Range
from asyncshard.sharding.batching import group_by
from asyncshard.sharding.common import open_document
from asyncshard.sharding.engine import (
    DEFAULT_RECHECK_AFTER,
    MISS,
    ChunkRead,
    Found,
    IndexIO,
    Location,
    Miss,
    ShardedAdapter,
    ShardFormat,
)
from asyncshard.store import BytesLike, Data, Store, validate_key

__all__ = ["MAX_CHUNK_ID", "PrecomputedFormat", "Uint64ShardedStore", "parse_chunk_key"]

MAX_CHUNK_ID = 2**64 - 1
_CHUNK_KEY = re.compile(r"0|[1-9][0-9]{0,19}")
#: Batches at least this large are hashed with numpy; smaller ones with ``mmh3`` per id.
_VECTOR_MIN = 16
#: Largest volume scale grid whose chunks are counted per shard (for whole-shard reads
#: and writes): hashing 4 million ids takes a fraction of a second, once per scale.
MAX_COUNTED_CHUNKS = 1 << 22


def parse_chunk_key(key: str) -> int | None:
    """The chunk id a key names: a canonical decimal (no sign, no leading zero) below 2**64."""
    if not _CHUNK_KEY.fullmatch(key):
        return None
    value = int(key)
    return value if value <= MAX_CHUNK_ID else None


@dataclass(frozen=True, slots=True)
class _ShardIndex:
    """A decoded shard index, the version and size of the shard it came from."""

    table: U64Array
    version: str | None
    size: int
    load: int  # tells loads apart when the backend reports no versions

    @property
    def tag(self) -> Hashable:
        """What minishard cache entries of this shard are keyed by."""
        return self.version if self.version is not None else ("load", self.load)


class _Minishard:
    """A decoded minishard index and, for single lookups, a dict from id to byte range."""

    __slots__ = ("index", "where")

    def __init__(self, index: MinishardIndex) -> None:
        self.index = index
        self.where: dict[int, tuple[int, int]] = dict(
            zip(
                index.ids.tolist(),
                zip(index.starts.tolist(), index.ends.tolist(), strict=True),
                strict=True,
            )
        )

    @property
    def nbytes(self) -> int:
        """What the cache charges: the arrays and about 100 bytes per dict entry."""
        return 3 * self.index.ids.nbytes + 100 * len(self.where)


class PrecomputedFormat(ShardFormat[int, "_ShardIndex"]):
    """The sharding of one precomputed directory; chunks are chunk ids (ints).

    Args:
        spec: the sharding specification.
        prefix: the directory of the wrapped store holding the shard files.
        names: a volume scale whose chunks are named ``x0-x1_y0-y1_z0-z1`` (else
            decimal chunk ids).
        max_chunk_nbytes: the largest decoded (gunzipped) chunk accepted.
    """

    kind: ClassVar[str] = "precomputed"

    def __init__(
        self,
        spec: ShardingSpec,
        prefix: str = "",
        *,
        names: Scale | None = None,
        max_chunk_nbytes: int = DEFAULT_MAX_CHUNK_NBYTES,
    ) -> None:
        self.spec = spec
        self.prefix = prefix.strip("/")
        self.base = f"{self.prefix}/" if self.prefix else ""
        self.names = names
        self.max_chunk_nbytes = max_chunk_nbytes
        self.encoded = spec.data_encoding == "gzip"
        # building with raw data encoding writes already-encoded chunk bytes unchanged
        self._prebuilt = dataclasses.replace(spec, data_encoding="raw")
        self._loads = itertools.count()
        self._shard_names: dict[int, str] = {}
        self._per_shard: dict[int, int] | None = None

    # -- keys -------------------------------------------------------------------------

    def chunk_id(self, key: str) -> int | None:
        """The chunk id a key names (a chunk name of the scale, or a decimal id)."""
        if self.names is None:
            return parse_chunk_key(key)
        return self.names.chunk_id_of_name(key)

    def shard_key(self, chunk_id: int) -> str:
        """The wrapped store's key of the shard holding ``chunk_id``."""
        shard, _ = self.spec.shard_and_minishard_of(chunk_id)
        return self._shard_key(shard)

    def _shard_key(self, shard: int) -> str:
        name = self._shard_names.get(shard)
        if name is None:
            name = self._shard_names[shard] = self.base + self.spec.shard_filename(shard)
        return name

    def locate(self, key: str) -> Location[int] | None:
        chunk_id = self.chunk_id(key)
        return None if chunk_id is None else Location(self.shard_key(chunk_id), chunk_id)

    def locate_many(self, keys: Sequence[str]) -> list[Location[int] | None]:
        if len(keys) < _VECTOR_MIN:
            return [self.locate(k) for k in keys]
        ids = [self.chunk_id(k) for k in keys]
        present = [i for i in ids if i is not None]
        shards = iter(self.spec.shard_and_minishard(as_uint64_array(present))[0].tolist())
        return [None if i is None else Location(self._shard_key(next(shards)), i) for i in ids]

    def locate_ids(self, chunk_ids: Sequence[int]) -> list[Location[int]]:
        """Locations of chunk ids (hashed in one vectorised call for large batches)."""
        if len(chunk_ids) < _VECTOR_MIN:
            return [Location(self.shard_key(i), i) for i in chunk_ids]
        shards = self.spec.shard_and_minishard(as_uint64_array(list(chunk_ids)))[0].tolist()
        return [Location(self._shard_key(s), i) for i, s in zip(chunk_ids, shards, strict=True)]

    def inner_key(self, key: str) -> str:
        return self.base + key

    def outer_key(self, inner_key: str) -> str | None:
        return inner_key[len(self.base) :] if inner_key.startswith(self.base) else None

    def is_shard(self, inner_key: str) -> bool:
        rel = self.outer_key(inner_key)
        if rel is None or "/" in rel:
            return False
        return self.spec.parse_shard_filename(rel) is not None

    def is_whole(self, shard_key: str, chunks: Collection[int]) -> bool:
        """With a volume scale, whether ``chunks`` are every chunk id of the scale that
        hashes to this shard (counted once per scale by hashing every grid position;
        grids over :data:`MAX_COUNTED_CHUNKS` chunks are not counted: never whole)."""
        expected = self.whole_count(shard_key)
        return expected is not None and len(set(chunks)) >= expected

    def whole_count(self, shard_key: str) -> int | None:
        counts = self._shard_counts()
        if counts is None:
            return None
        return counts.get(self._shard_number(shard_key), 0) or None

    def _shard_counts(self) -> dict[int, int] | None:
        if self.names is None:
            return None
        if self._per_shard is None:
            grid = self.names.grid_shape
            if math.prod(grid) > MAX_COUNTED_CHUNKS:
                return None
            positions = np.indices(grid).reshape(3, -1).T
            shards, _ = self.spec.shard_and_minishard(self.names.chunk_ids(positions))
            numbers, counts = np.unique(shards, return_counts=True)
            self._per_shard = dict(zip(numbers.tolist(), counts.tolist(), strict=True))
        return self._per_shard

    def _shard_number(self, shard_key: str) -> int:
        return self.spec.parse_shard_filename(shard_key[len(self.base) :]) or 0

    # -- indexes ----------------------------------------------------------------------

    def index_name(self, shard_key: str) -> tuple[Hashable, ...]:
        return ("shard", shard_key)

    async def _index(self, io: IndexIO, shard_key: str) -> CacheEntry:
        return await io.cached(("shard", shard_key), lambda: self._load_index(io, shard_key))

    async def _load_index(self, io: IndexIO, shard_key: str) -> CacheEntry:
        result = await io.store.get_object(shard_key, Range(0, shard_index_nbytes(self.spec)))
        if result is None:
            return LoadingCache.make_entry(None, None, 0)
        table = decode_shard_index(
            result.data, self.spec, key=shard_key, shard_size=result.meta.size
        )
        index = _ShardIndex(table, result.meta.version, result.meta.size, next(self._loads))
        return LoadingCache.make_entry(index, index.version, table.nbytes)

    def remember(self, io: IndexIO, shard_key: str, shard: memoryview, version: str) -> None:
        table = decode_shard_index(
            shard[: shard_index_nbytes(self.spec)], self.spec, key=shard_key, shard_size=len(shard)
        )
        index = _ShardIndex(table, version, len(shard), next(self._loads))
        io.put(("shard", shard_key), index, version, table.nbytes)

    async def _minishard(
        self, io: IndexIO, shard_key: str, index: _ShardIndex, minishard: int
    ) -> _Minishard | None:
        start, end = minishard_index_range(index.table, minishard)
        if start == end:
            return None

        async def load() -> CacheEntry:
            result = await io.store.get_object(shard_key, Range(start, end), if_match=index.version)
            if result is None:  # deleted since its shard index was cached
                raise ConflictError(f"{shard_key}: shard disappeared", key=shard_key)
            if len(result.data) != end - start:
                raise CorruptShardError(
                    f"minishard index bytes [{start}, {end}) lie past the end of the shard",
                    key=shard_key,
                )
            mini = _Minishard(
                decode_minishard_index(result.data, self.spec, key=shard_key, shard_size=index.size)
            )
            return LoadingCache.make_entry(mini, index.version, mini.nbytes)

        entry = await io.cached(("minishard", shard_key, index.tag, minishard), load)
        mini: _Minishard | None = entry.value
        return mini

    def lookup(
        self, io: IndexIO, shard_key: str, index: _ShardIndex, chunk: int
    ) -> tuple[int, int] | Miss | None:
        shard_index = index
        _, minishard = self.spec.shard_and_minishard_of(chunk)
        start, end = minishard_index_range(shard_index.table, minishard)
        if start == end:
            return None
        entry = io.peek(("minishard", shard_key, shard_index.tag, minishard))
        if entry is None:
            return MISS
        mini: _Minishard = entry.value
        return mini.where.get(chunk)

    def _minishards(self, chunk_ids: Sequence[int]) -> list[int]:
        if len(chunk_ids) >= _VECTOR_MIN:
            minishards: list[int] = self.spec.shard_and_minishard(as_uint64_array(list(chunk_ids)))[
                1
            ].tolist()
            return minishards
        return [self.spec.shard_and_minishard_of(i)[1] for i in chunk_ids]

    async def find(self, io: IndexIO, shard_key: str, chunks: Sequence[int]) -> Found[int]:
        entry = await self._index(io, shard_key)
        if entry.missing:
            return Found(False, None, {}, entry.loaded_at)
        index: _ShardIndex = entry.value
        ids: list[int] = list(chunks)
        pairs = zip(ids, self._minishards(ids), strict=True)
        groups = {m: [i for i, _ in p] for m, p in group_by(pairs, lambda p: p[1]).items()}
        if len(groups) == 1:
            [(minishard, members)] = groups.items()
            minis = [await self._minishard(io, shard_key, index, minishard)]
        else:
            minis = await asyncio.gather(
                *(self._minishard(io, shard_key, index, m) for m in groups)
            )
        entries: dict[int, tuple[int, int]] = {}
        for members, mini in zip(groups.values(), minis, strict=True):
            if mini is None:
                continue
            where = mini.where  # what the lean lookup uses: no numpy call for a few chunks
            for chunk_id in members:
                if (found := where.get(chunk_id)) is not None:
                    entries[chunk_id] = found
        return Found(True, index.version, entries, entry.loaded_at)

    async def chunks_in(self, io: IndexIO, shard_key: str) -> list[int]:
        entry = await self._index(io, shard_key)
        if entry.missing:
            return []
        index: _ShardIndex = entry.value
        nonempty = np.flatnonzero(index.table[:, 0] != index.table[:, 1]).tolist()
        minis = await asyncio.gather(*(self._minishard(io, shard_key, index, m) for m in nonempty))
        shard = self._shard_number(shard_key)
        out: list[int] = []
        for minishard, mini in zip(nonempty, minis, strict=True):
            if mini is not None:
                check_placement(mini.index, self.spec, shard, minishard, key=shard_key)
                out.extend(mini.index.ids.tolist())
        return out

    # -- shards and chunks --------------------------------------------------------------

    def split(self, shard_key: str, shard: memoryview) -> dict[int, memoryview]:
        return dict(split_shard(shard, self.spec, self._shard_number(shard_key), key=shard_key))

    def inspect(self, shard_key: str, shard: memoryview) -> ShardHealth[int]:
        return inspect_shard(shard, self.spec, self._shard_number(shard_key), key=shard_key)

    def build(self, shard_key: str, chunks: Mapping[int, BytesLike]) -> bytes:
        return build_shard(chunks, self._prebuilt)

    def empty_shard(self) -> bytes:
        return bytes(shard_index_nbytes(self.spec))

    def encode(self, raw: BytesLike) -> BytesLike:
        return encode_chunk_data(raw, self.spec)

    def decode(self, stored: BytesLike, shard_key: str, chunk: int) -> Data:
        return decode_chunk_data(stored, self.spec, key=shard_key, max_nbytes=self.max_chunk_nbytes)

    def decoded_limit(self, chunk: int) -> int:
        return self.max_chunk_nbytes

    # -- listing ----------------------------------------------------------------------

    def chunk_key(self, shard_key: str, chunk: int) -> str | None:
        chunk_id: int = chunk
        if self.names is None:
            return str(chunk_id)
        try:
            return self.names.chunk_name(self.names.grid_pos_of(chunk_id))
        except ValueError:  # an id that is no chunk of the scale
            return None

    def list_source(self, prefix: str) -> str:
        return self.base + prefix if "/" in prefix else self.base


class Uint64ShardedStore(ShardedAdapter[int]):
    """A Store whose keys are the chunks of a ``neuroglancer_uint64_sharded_v1`` directory.

    Args:
        inner: the store holding the shard files.
        spec: the sharding specification.
        prefix: the directory of ``inner`` holding the shard files (``""``: its root).
            Every key of this store is relative to it.
        names: a volume scale: chunks are named by their unsharded chunk names.
        cache: where decoded indexes are kept (default: the process-wide cache).
        max_chunk_nbytes: the largest decoded chunk accepted (gzip data).
        recheck_after: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        data_cache: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        lean_reads: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
    """

    def __init__(
        self,
        inner: Store,
        spec: ShardingSpec,
        *,
        prefix: str = "",
        names: Scale | None = None,
        cache: LoadingCache | None = None,
        max_chunk_nbytes: int = DEFAULT_MAX_CHUNK_NBYTES,
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: LoadingCache | None = None,
        lean_reads: bool = True,
    ) -> None:
        prefix = prefix.strip("/")
        fmt = PrecomputedFormat(
            spec,
            validate_key(prefix) if prefix else "",
            names=names,
            max_chunk_nbytes=max_chunk_nbytes,
        )
        super().__init__(
            inner,
            fmt,
            cache=cache,
            recheck_after=recheck_after,
            data_cache=data_cache,
            lean_reads=lean_reads,
        )
        self.precomputed = fmt
        self.spec = spec
        self.prefix = fmt.prefix

    def __repr__(self) -> str:
        return f"Uint64ShardedStore({self.inner!r}, prefix={self.prefix!r})"

    @classmethod
    async def open(
        cls,
        inner: StoreLocation,
        path: str = "",
        *,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Uint64ShardedStore:
        """Open the sharded directory ``path`` from its ``info`` (its ``sharding`` member).

        This is how mesh, skeleton and annotation-by-id directories are opened; volume
        scales are opened with :class:`~asyncshard.sharding.volume.PrecomputedVolume`.
        ``inner`` is any location of :func:`~asyncshard.open_store`; keywords the store
        does not take are storage options for it.
        """
        options, storage = split_options(options, keyword_names(cls))
        store, path, info_key, doc = await open_document(
            inner, storage_options, storage, path, "info"
        )
        if doc is None:
            raise InvalidMetadataError(f"{info_key}: no info file")
        if doc.get("sharding") is None:
            raise InvalidMetadataError(f"{info_key}: sharding is missing: the data is unsharded")
        try:
            spec = ShardingSpec.from_json(doc["sharding"])
        except InvalidMetadataError as exc:
            raise InvalidMetadataError(f"{info_key}: {exc}") from None
        return cls(store, spec, prefix=path, **options)

    def shard_key(self, chunk_id: int) -> str:
        """The key, in the wrapped store, of the shard that holds ``chunk_id``."""
        return self.precomputed.shard_key(chunk_id)

    def _ids(self, chunk_ids: Iterable[int]) -> builtins.list[int]:
        return list(dict.fromkeys(as_uint64_array(list(chunk_ids)).tolist()))

    # -- int-keyed reads --------------------------------------------------------------

    async def get_chunk(self, chunk_id: int) -> bytes | None:
        """The raw (decoded) bytes of one chunk, ``None`` if it does not exist.

        Concurrent calls are batched like concurrent ``get`` calls."""
        chunk_id = int(chunk_id)
        if not 0 <= chunk_id <= MAX_CHUNK_ID:
            raise ValueError(f"chunk id {chunk_id} is not a uint64")
        self._count("get", [str(chunk_id)])
        read = ChunkRead(str(chunk_id), self.shard_key(chunk_id), chunk_id, None, None)
        result = await self.reads.read_one(read)
        if result is None:
            return None
        self._returned(result.data)
        return bytes(result.data)

    async def get_chunks(self, chunk_ids: Iterable[int]) -> dict[int, bytes]:
        """``{id: raw bytes}`` of the chunks that exist among ``chunk_ids`` (repeats allowed)."""
        ids = self._ids(chunk_ids)
        self._count("get", map(str, ids))
        locs = self.precomputed.locate_ids(ids)
        reads = [
            ChunkRead(str(i), loc.shard_key, i, None, None)
            for i, loc in zip(ids, locs, strict=True)
        ]
        results = await self.reads.read_many(reads)
        out = {i: bytes(r.data) for i, r in zip(ids, results, strict=True) if r is not None}
        self.stats.bytes_returned += sum(map(len, out.values()))
        return out

    # -- int-keyed writes -------------------------------------------------------------

    def _by_shard(self, chunk_ids: Sequence[int]) -> dict[str, list[Location[int]]]:
        return group_by(self.precomputed.locate_ids(chunk_ids), lambda loc: loc.shard_key)

    async def set_chunks(
        self, chunks: Mapping[int, BytesLike], *, replace_shards: bool = False
    ) -> None:
        """Write chunks by id, one write per shard.

        By default each touched shard is read, merged and written back conditionally,
        so chunks not in ``chunks`` stay. ``replace_shards=True`` (see
        :meth:`write_shards`) builds each touched shard from ``chunks`` alone.
        """
        self._count_writes((str(i), v) for i, v in chunks.items())
        groups = self._by_shard(self._ids(chunks))
        triples = {
            s: [(str(loc.chunk), loc.chunk, chunks[loc.chunk]) for loc in locs]
            for s, locs in groups.items()
        }
        await run_writes(self.writes.chunk_writes(triples, replace=replace_shards))

    async def write_shards(self, chunks: Mapping[int, BytesLike]) -> None:
        """Write whole shards without reading: each shard holding one of ``chunks`` is
        replaced by a shard of exactly the given chunks (its other chunks are dropped).

        For writers that produce every chunk of a shard at once (conversion tools);
        group chunk ids with :meth:`shard_key` to know which chunks share a shard.
        """
        await self.set_chunks(chunks, replace_shards=True)

    async def erase_chunks(self, chunk_ids: Iterable[int]) -> None:
        """Erase chunks by id (one read-merge-write per shard; emptied shards are deleted)."""
        ids = self._ids(chunk_ids)
        self._count("delete", map(str, ids))
        groups = self._by_shard(ids)
        erases = {s: [(str(loc.chunk), loc.chunk) for loc in m] for s, m in groups.items()}
        await run_writes(self.writes.chunk_erases(erases))

    # -- listing ----------------------------------------------------------------------

    async def chunk_ids(self) -> builtins.list[int]:
        """Every chunk id stored in the directory (listing, then indexes through the cache)."""
        self.stats.requests["list"] += 1
        shard_keys = [
            key
            async for key in self.inner.list_prefix(self.precomputed.base)
            if self.precomputed.is_shard(key)
        ]
        chunks = await self.listing.chunks(shard_keys)
        return sorted(chunk_id for _, chunk_id in chunks)
