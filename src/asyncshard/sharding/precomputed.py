"""Uint64ShardedStore: chunks of a ``neuroglancer_uint64_sharded_v1`` directory as Store keys.

The store presents the directory ``prefix`` of a wrapped store as the unsharded directory
it encodes: chunk ids (canonical decimal strings, ``0 <= id < 2**64``) in place of the
``<hex>.shard`` files, and every other key of the directory (``info``, unsharded files,
sub-directories) passed through unchanged. Int-keyed methods (:meth:`get_chunk`,
:meth:`get_chunks`, :meth:`set_chunks`, :meth:`write_shards`, :meth:`erase_chunks`) skip
the decimal keys.

**Reads** cost, per shard, one request for the whole shard index (``Range(0, 16 *
2**minishard_bits)``), one per distinct minishard index, and one coalesced
``get_partial_values`` round for chunk data. Both indexes are decoded once and kept in the
shared :class:`IndexCache` (single-flight, byte-charged): a cold chunk costs 3 requests,
another chunk of the same minishard 1. Minishard-index reads and data reads are
conditioned on the version of the cached shard index, so a shard rewritten elsewhere is
noticed by the read itself; the stale entry is dropped and the read runs again. Ids are
hashed to shards and minishards in one vectorised call per batch. gzip data is decoded
(bounded); a byte range of a gzip chunk is cut from the decoded bytes, and ``head`` of a
gzip chunk reads it (the decoded size is stored nowhere). The version of a chunk is the
version of its shard.

**Writes** never drop chunks: :meth:`set`, :meth:`set_values`, :meth:`set_chunks` and
erasing read the whole shard, merge, and write it back (chunks kept encoded, so untouched
gzip chunks are not recompressed) with a conditional write, retried on conflict. There
is no fixed set of ids per shard, so only the caller knows that a batch is a whole shard:
:meth:`write_shards` (``set_chunks(..., replace_shards=True)``) builds each shard from
the batch alone and writes it without reading, replacing whatever was there. Erasing the
last chunk of a shard deletes the shard.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import gzip
import itertools
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncshard.cache import CacheEntry, IndexCache, default_cache
from asyncshard.errors import ConflictError, CorruptShardError, InvalidMetadataError
from asyncshard.formats.precomputed.shard import (
    MinishardIndex,
    build_shard,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec, U64Array, as_uint64_array
from asyncshard.ranges import ByteRange, Range, resolve
from asyncshard.sharding.common import (
    ConditionFailed,
    check_caller_condition,
    new_namespace,
    read_json,
    read_merge_write,
    retry_stale,
)
from asyncshard.store import (
    BytesLike,
    Data,
    GetResult,
    ObjectMeta,
    Store,
    apply_runs,
    check_condition,
    validate_key,
    validate_prefix,
)

__all__ = ["MAX_CHUNK_ID", "Uint64ShardedStore", "parse_chunk_key"]

MAX_CHUNK_ID = 2**64 - 1
_CHUNK_KEY = re.compile(r"0|[1-9][0-9]{0,19}")
_GZIP_LEVEL = 6


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


@dataclass(frozen=True, slots=True)
class _ChunkRead:
    """One requested chunk: the store key it is reported under, its id, range and condition."""

    key: str
    chunk_id: int
    rng: ByteRange | None
    if_match: str | None


@dataclass(frozen=True, slots=True)
class _Located:
    """Where a chunk's (encoded) bytes lie, and the version of the shard holding them."""

    shard_key: str
    start: int
    end: int
    version: str | None


class _Current:
    """A chunk's current value during a merge, decoded only if a change asks for it."""

    def __init__(
        self, encoded: BytesLike | None, version: str | None, spec: ShardingSpec, shard_key: str
    ) -> None:
        self.encoded = encoded
        self.version = version
        self._spec = spec
        self._shard_key = shard_key

    @property
    def exists(self) -> bool:
        return self.encoded is not None

    def value(self) -> bytes | None:
        if self.encoded is None:
            return None
        return decode_chunk_data(self.encoded, self._spec, key=self._shard_key)


# A pending change to one chunk: its current value -> new raw bytes, or None to erase it.
Change = Callable[[_Current], BytesLike | None]


class Uint64ShardedStore(Store):
    """A Store whose keys are the chunk ids of a ``neuroglancer_uint64_sharded_v1`` directory.

    Args:
        inner: the store holding the shard files.
        spec: the sharding specification.
        prefix: the directory of ``inner`` holding the shard files (``""``: its root).
            Every key of this store is relative to it.
        cache: where decoded indexes are kept (default: the process-wide cache).
    """

    def __init__(
        self,
        inner: Store,
        spec: ShardingSpec,
        *,
        prefix: str = "",
        cache: IndexCache | None = None,
    ) -> None:
        super().__init__(
            max_gap=inner.max_gap,
            max_request=inner.max_request,
            max_concurrency=inner.max_concurrency,
        )
        prefix = prefix.strip("/")
        self.inner = inner
        self.spec = spec
        self.prefix = validate_key(prefix) if prefix else ""
        self.cache = cache if cache is not None else default_cache()
        self._base = f"{self.prefix}/" if self.prefix else ""
        self._ns = new_namespace("precomputed")
        self._loads = itertools.count()
        # building with raw data encoding writes already-encoded chunk bytes unchanged
        self._prebuilt = dataclasses.replace(spec, data_encoding="raw")

    def __repr__(self) -> str:
        return f"Uint64ShardedStore({self.inner!r}, prefix={self.prefix!r})"

    @classmethod
    async def open(cls, inner: Store, path: str = "", **options: Any) -> Uint64ShardedStore:
        """Open the sharded directory ``path`` from its ``info`` (its ``sharding`` member).

        This is how mesh, skeleton and annotation-by-id directories are opened; volume
        scales are opened with :class:`~asyncshard.sharding.volume.PrecomputedVolume`.
        """
        path = path.strip("/")
        info_key = f"{path}/info" if path else "info"
        doc = await read_json(inner, info_key)
        if doc is None:
            raise InvalidMetadataError(f"{info_key}: no info file")
        if doc.get("sharding") is None:
            raise InvalidMetadataError(f"{info_key}: sharding is missing: the data is unsharded")
        try:
            spec = ShardingSpec.from_json(doc["sharding"])
        except InvalidMetadataError as exc:
            raise InvalidMetadataError(f"{info_key}: {exc}") from None
        return cls(inner, spec, prefix=path, **options)

    # -- capabilities ---------------------------------------------------------------------

    @property
    def supports_writes(self) -> bool:
        return self.inner.supports_writes

    @property
    def supports_listing(self) -> bool:
        return self.inner.supports_listing

    @property
    def supports_conditional_writes(self) -> bool:
        return self.inner.supports_conditional_writes

    # -- keys -----------------------------------------------------------------------------

    def _inner_key(self, key: str) -> str:
        return self._base + key

    def shard_key(self, chunk_id: int) -> str:
        """The key, in the wrapped store, of the shard that holds ``chunk_id``."""
        shard, _ = self.spec.shard_and_minishard_of(chunk_id)
        return self._base + self.spec.shard_filename(shard)

    def _is_shard_file(self, rel: str) -> bool:
        return "/" not in rel and self.spec.parse_shard_filename(rel) is not None

    def _shard_keys_of(self, ids: U64Array) -> tuple[builtins.list[str], builtins.list[int]]:
        """Shard key and minishard of each id (hashed in one vectorised call)."""
        shards, minishards = self.spec.shard_and_minishard(ids)
        names = {s: self._base + self.spec.shard_filename(s) for s in set(shards.tolist())}
        return [names[s] for s in shards.tolist()], minishards.tolist()

    # -- the index cache ------------------------------------------------------------------

    async def _shard_index(self, shard_key: str) -> _ShardIndex | None:
        entry = await self.cache.get(
            (self._ns, "shard", shard_key), lambda: self._load_shard_index(shard_key)
        )
        return None if entry.missing else entry.value

    async def _load_shard_index(self, shard_key: str) -> CacheEntry:
        result = await self.inner.get_object(shard_key, Range(0, shard_index_nbytes(self.spec)))
        if result is None:
            return IndexCache.make_entry(None, None, 0)
        table = decode_shard_index(
            result.data, self.spec, key=shard_key, shard_size=result.meta.size
        )
        index = _ShardIndex(table, result.meta.version, result.meta.size, next(self._loads))
        return IndexCache.make_entry(index, index.version, table.nbytes)

    async def _minishard(
        self, shard_key: str, index: _ShardIndex, minishard: int
    ) -> MinishardIndex | None:
        start, end = minishard_index_range(index.table, minishard)
        if start == end:
            return None
        entry = await self.cache.get(
            (self._ns, "minishard", shard_key, index.tag, minishard),
            lambda: self._load_minishard(shard_key, index, start, end),
        )
        return entry.value  # type: ignore[no-any-return]

    async def _load_minishard(
        self, shard_key: str, index: _ShardIndex, start: int, end: int
    ) -> CacheEntry:
        result = await self.inner.get_object(shard_key, Range(start, end), if_match=index.version)
        if result is None:  # deleted since its shard index was cached
            raise ConflictError(f"{shard_key}: shard disappeared", key=shard_key)
        if len(result.data) != end - start:
            self._forget(shard_key)
            raise CorruptShardError(
                f"minishard index bytes [{start}, {end}) lie past the end of the shard",
                key=shard_key,
            )
        mini = decode_minishard_index(result.data, self.spec, key=shard_key, shard_size=index.size)
        return IndexCache.make_entry(mini, index.version, 3 * mini.ids.nbytes)

    def _remember(self, shard_key: str, shard: BytesLike, version: str | None) -> None:
        """Cache the shard index of a shard we just wrote (no read needed).

        Only with a version: reads through an unversioned entry could not notice a later
        rewrite by someone else, so without one the next read loads the index afresh.
        """
        if version is None:
            self._forget(shard_key)
            return
        view = memoryview(shard)
        table = decode_shard_index(
            view[: shard_index_nbytes(self.spec)], self.spec, key=shard_key, shard_size=len(view)
        )
        index = _ShardIndex(table, version, len(view), next(self._loads))
        self.cache.put((self._ns, "shard", shard_key), index, version, table.nbytes)

    def _forget(self, shard_key: str) -> None:
        """Drop a shard's cached index; its minishard entries die with the version/load tag."""
        self.cache.invalidate((self._ns, "shard", shard_key))

    # -- reads ----------------------------------------------------------------------------

    async def _locate(
        self, reads: Sequence[_ChunkRead], shard_keys: Sequence[str], minishards: Sequence[int]
    ) -> builtins.list[_Located | None]:
        """Where each read's chunk lies: shard indexes, then minishard indexes (cached)."""
        by_shard: dict[str, dict[int, builtins.list[int]]] = {}
        for i, (shard_key, minishard) in enumerate(zip(shard_keys, minishards, strict=True)):
            by_shard.setdefault(shard_key, {}).setdefault(minishard, []).append(i)
        out: list[_Located | None] = [None] * len(reads)

        async def locate_in(shard_key: str, groups: dict[int, builtins.list[int]]) -> None:
            index = await self._shard_index(shard_key)
            if index is None:
                return
            minis = await asyncio.gather(*(self._minishard(shard_key, index, m) for m in groups))
            for members, mini in zip(groups.values(), minis, strict=True):
                if mini is None or mini.ids.size == 0:
                    continue
                wanted = as_uint64_array([reads[i].chunk_id for i in members])
                pos = np.minimum(np.searchsorted(mini.ids, wanted), mini.ids.size - 1)
                found = mini.ids[pos] == wanted
                for i, p, ok in zip(members, pos.tolist(), found.tolist(), strict=True):
                    if ok:
                        start, end = int(mini.starts[p]), int(mini.ends[p])
                        out[i] = _Located(shard_key, start, end, index.version)

        await asyncio.gather(*(locate_in(s, g) for s, g in by_shard.items()))
        return out

    async def _read_chunks(self, reads: Sequence[_ChunkRead]) -> builtins.list[GetResult | None]:
        """Read chunks: indexes (cached), then one coalesced data round; stale indexes retried."""
        if not reads:
            return []
        shard_keys, minishards = self._shard_keys_of(as_uint64_array([r.chunk_id for r in reads]))
        return await retry_stale(
            lambda: self._read_chunks_once(reads, shard_keys, minishards),
            set(shard_keys),
            self._forget,
        )

    async def _read_chunks_once(
        self, reads: Sequence[_ChunkRead], shard_keys: Sequence[str], minishards: Sequence[int]
    ) -> builtins.list[GetResult | None]:
        located = await self._locate(reads, shard_keys, minishards)
        raw = self.spec.data_encoding == "raw"
        out: list[GetResult | None] = [None] * len(reads)
        fetch: list[tuple[int, _Located, Range]] = []
        for i, (read, loc) in enumerate(zip(reads, located, strict=True)):
            if loc is None:
                continue
            meta = ObjectMeta(read.key, loc.end - loc.start, loc.version)
            # a caller's condition (only the version counts, so the encoded size will do);
            # it names the chunk key, not a shard key, so it is raised without a retry
            check_condition(read.key, meta, read.if_match, False)
            if not raw:
                fetch.append((i, loc, Range(loc.start, loc.end)))
                continue
            start, end = resolve(read.rng, meta.size)
            if start == end:
                out[i] = GetResult(b"", meta)
            else:
                fetch.append((i, loc, Range(loc.start + start, loc.start + end)))
        versions = {loc.shard_key: loc.version for _, loc, _ in fetch if loc.version is not None}
        data = await self.inner.get_partial_values(
            [(loc.shard_key, rng) for _, loc, rng in fetch], if_match=versions
        )
        for (i, loc, rng), value in zip(fetch, data, strict=True):
            if value is None:  # deleted since its index was cached
                raise ConflictError(f"{loc.shard_key}: shard disappeared", key=loc.shard_key)
            if len(value) != rng.end - rng.start:
                self._forget(loc.shard_key)
                raise CorruptShardError(
                    f"chunk bytes [{rng.start}, {rng.end}) lie past the end of the shard",
                    key=loc.shard_key,
                )
            read = reads[i]
            if raw:
                out[i] = GetResult(value, ObjectMeta(read.key, loc.end - loc.start, loc.version))
                continue
            decoded = decode_chunk_data(value, self.spec, key=loc.shard_key)
            start, end = resolve(read.rng, len(decoded))
            meta = ObjectMeta(read.key, len(decoded), loc.version)
            out[i] = GetResult(memoryview(decoded)[start:end], meta)
        return out

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        chunk_id = parse_chunk_key(key)
        if chunk_id is None:
            result = await self.inner.get_object(
                self._inner_key(key), byte_range, if_match=if_match
            )
            return None if result is None else with_key(result, key)
        [result] = await self._read_chunks([_ChunkRead(key, chunk_id, byte_range, if_match)])
        return result

    async def _head(self, key: str) -> ObjectMeta | None:
        chunk_id = parse_chunk_key(key)
        if chunk_id is None:
            meta = await self.inner.head(self._inner_key(key))
            return None if meta is None else dataclasses.replace(meta, key=key)
        read = _ChunkRead(key, chunk_id, None, None)
        if self.spec.data_encoding == "gzip":  # the decoded size needs the data
            [result] = await self._read_chunks([read])
            return None if result is None else result.meta
        shard_keys, minishards = self._shard_keys_of(as_uint64_array([chunk_id]))

        async def locate() -> _Located | None:
            return (await self._locate([read], shard_keys, minishards))[0]

        loc = await retry_stale(locate, shard_keys, self._forget)
        return None if loc is None else ObjectMeta(key, loc.end - loc.start, loc.version)

    async def get_partial_values(
        self,
        key_ranges: Iterable[tuple[str, ByteRange | None]],
        *,
        if_match: Mapping[str, str] | None = None,
    ) -> builtins.list[Data | None]:
        """Read chunks and pass-through keys; see :meth:`Store.get_partial_values`."""
        items = [(validate_key(k), r) for k, r in key_ranges]
        out: list[Data | None] = [None] * len(items)
        chunk_items: list[tuple[int, _ChunkRead]] = []
        plain: list[int] = []
        for i, (key, rng) in enumerate(items):
            chunk_id = parse_chunk_key(key)
            if chunk_id is None:
                plain.append(i)
            else:
                version = if_match.get(key) if if_match else None
                chunk_items.append((i, _ChunkRead(key, chunk_id, rng, version)))
        self.stats.requests["get"] += len(items)

        async def read_plain() -> None:
            if plain:
                versions = {
                    self._inner_key(k): v
                    for k, v in (if_match or {}).items()
                    if parse_chunk_key(k) is None
                }
                values = await self.inner.get_partial_values(
                    [(self._inner_key(items[i][0]), items[i][1]) for i in plain],
                    if_match=versions,
                )
                for i, v in zip(plain, values, strict=True):
                    out[i] = v

        async def read_chunks() -> None:
            if chunk_items:
                results = await self._read_chunks([c for _, c in chunk_items])
                for (i, _), r in zip(chunk_items, results, strict=True):
                    out[i] = None if r is None else r.data

        await asyncio.gather(read_plain(), read_chunks())
        for v in out:
            if v is not None:
                self.stats.bytes_returned += len(v)
        return out

    # -- int-keyed reads ------------------------------------------------------------------

    async def get_chunk(self, chunk_id: int) -> bytes | None:
        """The raw (decoded) bytes of one chunk, ``None`` if it does not exist."""
        return (await self.get_chunks([chunk_id])).get(int(chunk_id))

    async def get_chunks(self, chunk_ids: Iterable[int]) -> dict[int, bytes]:
        """``{id: raw bytes}`` of the chunks that exist among ``chunk_ids`` (repeats allowed)."""
        ids = list(dict.fromkeys(as_uint64_array(list(chunk_ids)).tolist()))
        self.stats.requests["get"] += len(ids)
        results = await self._read_chunks([_ChunkRead(str(i), i, None, None) for i in ids])
        out = {i: bytes(r.data) for i, r in zip(ids, results, strict=True) if r is not None}
        self.stats.bytes_returned += sum(map(len, out.values()))
        return out

    # -- writes ---------------------------------------------------------------------------

    def _encode(self, value: BytesLike) -> BytesLike:
        if self.spec.data_encoding == "gzip":
            return gzip.compress(value, compresslevel=_GZIP_LEVEL, mtime=0)
        return value

    def _decode_shard(self, shard: BytesLike, shard_key: str) -> dict[int, memoryview]:
        """Every chunk of a whole shard, still encoded; ``CorruptShardError`` if inconsistent."""
        view = memoryview(shard)
        nbytes = shard_index_nbytes(self.spec)
        table = decode_shard_index(view[:nbytes], self.spec, key=shard_key, shard_size=len(view))
        chunks: dict[int, memoryview] = {}
        for minishard in np.flatnonzero(table[:, 0] != table[:, 1]).tolist():
            start, end = minishard_index_range(table, minishard)
            mini = decode_minishard_index(
                view[start:end], self.spec, key=shard_key, shard_size=len(view)
            )
            self._check_placement(shard_key, minishard, mini.ids)
            for chunk_id, a, b in zip(
                mini.ids.tolist(), mini.starts.tolist(), mini.ends.tolist(), strict=True
            ):
                chunks[chunk_id] = view[a:b]
        return chunks

    def _check_placement(self, shard_key: str, minishard: int, ids: U64Array) -> None:
        """Raise unless every id hashes to this shard and minishard (else it is unreachable)."""
        shard = self.spec.parse_shard_filename(shard_key[len(self._base) :])
        shards, minis = self.spec.shard_and_minishard(ids)
        bad = (shards != np.uint64(shard or 0)) | (minis != np.uint64(minishard))
        if bool(bad.any()):
            i = int(np.argmax(bad))
            raise CorruptShardError(
                f"chunk id {int(ids[i])} is stored in minishard {minishard} but belongs to "
                f"shard {int(shards[i])} minishard {int(minis[i])}",
                key=shard_key,
            )

    async def _update_shard(self, shard_key: str, changes: Mapping[int, Change]) -> str | None:
        """Read-merge-write one shard under a conditional write, retried on conflict."""

        def rebuild(current: GetResult | None) -> BytesLike | None:
            self._forget(shard_key)
            chunks: dict[int, BytesLike] = {}
            version = None
            if current is not None:
                chunks = dict(self._decode_shard(current.data, shard_key))
                version = current.meta.version
            for chunk_id, change in changes.items():
                new = change(_Current(chunks.get(chunk_id), version, self.spec, shard_key))
                if new is None:
                    chunks.pop(chunk_id, None)
                else:
                    chunks[chunk_id] = self._encode(new)
            return build_shard(chunks, self._prebuilt) if chunks else None

        def written(shard: BytesLike | None, version: str | None) -> None:
            if shard is not None:
                self._remember(shard_key, shard, version)

        return await read_merge_write(
            self.inner, shard_key, rebuild, written, lambda: bytes(shard_index_nbytes(self.spec))
        )

    async def _write_whole(self, shard_key: str, chunks: Mapping[int, BytesLike]) -> None:
        shard = build_shard(chunks, self.spec)
        self._forget(shard_key)
        version = await self.inner.set(shard_key, shard)
        self._remember(shard_key, shard, version)

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        chunk_id = parse_chunk_key(key)
        if chunk_id is None:
            if self._is_shard_file(key):
                self._forget(self._inner_key(key))
            return await self.inner.set(
                self._inner_key(key), data, if_match=if_match, if_absent=if_absent
            )
        value = bytes(data)

        def replace(current: _Current) -> BytesLike:
            meta = ObjectMeta(key, 0, current.version) if current.exists else None
            check_caller_condition(key, meta, if_match, if_absent)
            return value

        try:
            return await self._update_shard(self.shard_key(chunk_id), {chunk_id: replace})
        except ConditionFailed as failed:
            raise failed.error from None

    def _group(self, chunk_ids: Sequence[int]) -> dict[str, builtins.list[int]]:
        """Chunk ids grouped by the key of their shard."""
        shard_keys, _ = self._shard_keys_of(as_uint64_array(list(chunk_ids)))
        groups: dict[str, list[int]] = {}
        for chunk_id, shard_key in zip(chunk_ids, shard_keys, strict=True):
            groups.setdefault(shard_key, []).append(chunk_id)
        return groups

    async def set_values(self, values: Mapping[str, BytesLike]) -> None:
        """Write many chunks (and pass-through keys): one read-merge-write per shard."""
        chunks: dict[int, BytesLike] = {}
        plain: dict[str, BytesLike] = {}
        for key, value in values.items():
            chunk_id = parse_chunk_key(validate_key(key))
            if chunk_id is None:
                plain[key] = value
            else:
                chunks[chunk_id] = value
        self.stats.requests["put"] += len(values)
        await asyncio.gather(
            *(self._put(k, v, None, False) for k, v in plain.items()),
            self._set_chunks(chunks, replace_shards=False),
        )

    async def set_chunks(
        self, chunks: Mapping[int, BytesLike], *, replace_shards: bool = False
    ) -> None:
        """Write chunks by id, one write per shard.

        By default each touched shard is read, merged and written back conditionally,
        so chunks not in ``chunks`` stay. ``replace_shards=True`` (see
        :meth:`write_shards`) builds each touched shard from ``chunks`` alone.
        """
        self.stats.requests["put"] += len(chunks)
        await self._set_chunks(chunks, replace_shards=replace_shards)

    async def write_shards(self, chunks: Mapping[int, BytesLike]) -> None:
        """Write whole shards without reading: each shard holding one of ``chunks`` is
        replaced by a shard of exactly the given chunks (its other chunks are dropped).

        For writers that produce every chunk of a shard at once (conversion tools);
        group chunk ids with :meth:`shard_key` to know which chunks share a shard.
        """
        await self.set_chunks(chunks, replace_shards=True)

    async def _set_chunks(self, chunks: Mapping[int, BytesLike], *, replace_shards: bool) -> None:
        if not chunks:
            return
        groups = self._group(list(chunks))
        jobs: list[Awaitable[Any]] = []
        for shard_key, ids in groups.items():
            if replace_shards:
                jobs.append(self._write_whole(shard_key, {i: chunks[i] for i in ids}))
            else:
                jobs.append(self._update_shard(shard_key, {i: _constant(chunks[i]) for i in ids}))
        await asyncio.gather(*jobs)

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (one read-merge-write per shard) or plain objects."""
        runs: dict[int, list[tuple[int, BytesLike]]] = {}
        plain: list[tuple[str, int, BytesLike]] = []
        for key, start, value in key_start_values:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
            chunk_id = parse_chunk_key(validate_key(key))
            if chunk_id is None:
                if self._is_shard_file(key):
                    self._forget(self._inner_key(key))
                plain.append((self._inner_key(key), start, value))
            else:
                runs.setdefault(chunk_id, []).append((start, value))
        jobs: list[Awaitable[Any]] = [
            self._update_shard(shard_key, {i: _patcher(runs[i]) for i in ids})
            for shard_key, ids in (self._group(list(runs)) if runs else {}).items()
        ]
        if plain:
            jobs.append(self.inner.set_partial_values(plain))
        await asyncio.gather(*jobs)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (deleting shards left empty) and pass-through keys."""
        ids: list[int] = []
        plain: list[str] = []
        for key in keys:
            chunk_id = parse_chunk_key(validate_key(key))
            if chunk_id is None:
                if self._is_shard_file(key):
                    self._forget(self._inner_key(key))
                plain.append(self._inner_key(key))
            else:
                ids.append(chunk_id)
        self.stats.requests["delete"] += len(plain) + len(ids)
        await asyncio.gather(self.inner.erase_values(plain), self._erase_chunks(ids))

    async def erase_chunks(self, chunk_ids: Iterable[int]) -> None:
        """Erase chunks by id (one read-merge-write per shard; emptied shards are deleted)."""
        ids = as_uint64_array(list(chunk_ids)).tolist()
        self.stats.requests["delete"] += len(ids)
        await self._erase_chunks(ids)

    async def _erase_chunks(self, ids: Sequence[int]) -> None:
        if ids:
            groups = self._group(ids)
            await asyncio.gather(
                *(self._update_shard(s, dict.fromkeys(g, _erase)) for s, g in groups.items())
            )

    async def _delete(self, key: str) -> None:
        await self.erase_values([key])

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix``; ``""`` deletes the whole directory."""
        prefix = validate_prefix(prefix)
        if not prefix:
            await self.inner.erase_prefix(self._base)
            self.cache.invalidate_namespace(self._ns)
            return
        await self.erase_values([k async for k in self.list_prefix(prefix)])

    # -- listing --------------------------------------------------------------------------

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        may_hold_ids = prefix == "" or prefix.isdigit()
        source = self._base if may_hold_ids else self._base + prefix
        shard_keys: list[str] = []
        async for key in self.inner.list_prefix(source):
            rel = key[len(self._base) :]
            if self._is_shard_file(rel):
                if may_hold_ids:
                    shard_keys.append(key)
            elif rel.startswith(prefix) and parse_chunk_key(rel) is None:
                yield rel  # a plain object named like a chunk id is shadowed by the chunk
        for chunk_id in await self._ids_in(shard_keys):
            key = str(chunk_id)
            if key.startswith(prefix):
                yield key

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        keys, prefixes = await self.inner.list_dir(self._base + prefix)
        n = len(self._base)
        rel_keys = [k[n:] for k in keys]
        rel_prefixes = sorted(p[n:] for p in prefixes)
        if prefix:
            return sorted(rel_keys), rel_prefixes
        shard_keys = [self._base + k for k in rel_keys if self._is_shard_file(k)]
        plain = [k for k in rel_keys if not self._is_shard_file(k) and parse_chunk_key(k) is None]
        ids = await self._ids_in(shard_keys)
        return sorted(plain + [str(i) for i in ids]), rel_prefixes

    async def _ids_in(self, shard_keys: Sequence[str]) -> builtins.list[int]:
        """The chunk ids stored in the given shards (indexes read through the cache)."""

        async def ids_of(shard_key: str) -> builtins.list[int]:
            index = await self._shard_index(shard_key)
            if index is None:
                return []
            nonempty = np.flatnonzero(index.table[:, 0] != index.table[:, 1]).tolist()
            minis = await asyncio.gather(*(self._minishard(shard_key, index, m) for m in nonempty))
            out: list[int] = []
            for minishard, mini in zip(nonempty, minis, strict=True):
                if mini is not None:
                    self._check_placement(shard_key, minishard, mini.ids)
                    out.extend(mini.ids.tolist())
            return out

        async def bounded(shard_key: str) -> builtins.list[int]:
            return await self._bounded(
                retry_stale(lambda: ids_of(shard_key), (shard_key,), self._forget)
            )

        found = await asyncio.gather(*(bounded(s) for s in shard_keys))
        return [i for ids in found for i in ids]

    async def chunk_ids(self) -> builtins.list[int]:
        """Every chunk id stored in the directory (listing, then indexes through the cache)."""
        self.stats.requests["list"] += 1
        shard_keys = [
            key
            async for key in self.inner.list_prefix(self._base)
            if self._is_shard_file(key[len(self._base) :])
        ]
        return sorted(await self._ids_in(shard_keys))

    async def _close(self) -> None:
        await self.inner.close()


def with_key(result: GetResult, key: str) -> GetResult:
    """``result`` reported under ``key`` (a key of a view rather than of the wrapped store)."""
    return GetResult(result.data, dataclasses.replace(result.meta, key=key))


def _constant(value: BytesLike) -> Change:
    return lambda _current: value


def _erase(_current: _Current) -> None:
    return None


def _patcher(runs: Sequence[tuple[int, BytesLike]]) -> Change:
    return lambda current: apply_runs(current.value(), runs)
