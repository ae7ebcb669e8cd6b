"""ShardedStore: inner chunks of a sharded Zarr array as keys of a Store (spec 004).

The store wraps any Store holding a sharded array. Keys that name inner chunks
(``arr/c/96/18``) are translated to their shard (``arr/c/3/9`` for 32x2 chunks per
shard) and a position in it; every other key passes through to the wrapped store.

Reads cost one request for the shard index (cached in the shared :class:`IndexCache`,
single-flight) and one coalesced ``get_partial_values`` round for chunk data. Data reads
are conditioned on the version of the cached index, so a shard rewritten elsewhere is
noticed by the read itself; the stale entry is dropped and the read retried once.

Writes that cover every chunk of a shard build it without reading. Other writes read
the whole shard, merge, and write it back compacted (chunks in Morton order) with a
conditional write, retrying on conflict. Erasing the last chunk deletes the shard.
"""

from __future__ import annotations

import asyncio
import builtins
import math
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from asyncshard.cache import CacheEntry, IndexCache, default_cache
from asyncshard.errors import ConflictError, CorruptShardError, InvalidMetadataError
from asyncshard.formats.zarr3.metadata import (
    Coords,
    ShardingLayout,
    is_sharded,
    parse_draft_transformer,
    parse_zarr3_array,
)
from asyncshard.formats.zarr3.shard import (
    EMPTY,
    chunk_slices,
    decode_index,
    decode_shard,
    empty_index,
    encode_index,
    encode_shard,
    index_byte_range,
)
from asyncshard.ranges import ByteRange, Range, Suffix, resolve
from asyncshard.sharding.batching import Batcher
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
    validate_key,
    validate_prefix,
)

T = TypeVar("T")
Position = Coords
# A pending change to one chunk: (current bytes, shard version) -> new bytes, or None to erase.
Change = Callable[[BytesLike | None, str | None], BytesLike | None]


@dataclass(frozen=True, slots=True)
class _ChunkRead:
    """One requested chunk range: its key, shard, position, range and required version."""

    key: str
    shard_key: str
    pos: Position
    rng: ByteRange | None
    if_match: str | None


@dataclass(frozen=True, slots=True)
class _Index:
    """A decoded shard index and the version of the shard it came from."""

    table: np.ndarray[Any, np.dtype[np.uint64]]
    version: str | None


class ShardedStore(Store):
    """A Store whose chunk keys are the inner chunks of a sharded Zarr array."""

    def __init__(
        self,
        inner: Store,
        layout: ShardingLayout,
        *,
        cache: IndexCache | None = None,
        write_order: Literal["morton", "C"] = "morton",
    ) -> None:
        super().__init__(
            max_gap=inner.max_gap,
            max_request=inner.max_request,
            max_concurrency=inner.max_concurrency,
        )
        self.inner = inner
        self.layout = layout
        self.cache = cache if cache is not None else default_cache()
        self.write_order = write_order
        self._ns = new_namespace("zarr")
        self._batcher: Batcher[_ChunkRead, GetResult | None] = Batcher(
            self._read_chunks, lambda read: read.shard_key
        )

    def __repr__(self) -> str:
        return f"ShardedStore({self.inner!r}, chunks_per_shard={self.layout.chunks_per_shard})"

    @classmethod
    async def open(cls, inner: Store, array_path: str = "", **options: Any) -> ShardedStore:
        """Open the sharded array at ``array_path`` of ``inner`` from its metadata.

        Reads ``<array_path>/zarr.json`` (Zarr v3 ``sharding_indexed``) or, failing that,
        ``meta/root/<array_path>.array.json`` (the draft sharding storage transformer).
        """
        path = array_path.strip("/")
        meta_key = f"{path}/zarr.json" if path else "zarr.json"
        doc = await read_json(inner, meta_key)
        if doc is not None:
            if not is_sharded(doc):
                raise InvalidMetadataError(f"{meta_key}: codecs: the array is not sharded")
            return cls(
                inner, parse_zarr3_array(doc, key_prefix=f"{path}/" if path else ""), **options
            )
        draft_key = f"meta/root/{path}.array.json" if path else "meta/root.array.json"
        doc = await read_json(inner, draft_key)
        if doc is not None:
            return cls(inner, parse_draft_transformer(doc, path), **options)
        raise InvalidMetadataError(f"no array metadata at {meta_key} or {draft_key}")

    async def _bounded(self, awaitable: Awaitable[T]) -> T:
        """No limit here: the wrapped store bounds the real I/O, and a limit at this level
        would split concurrent reads into separate batches."""
        return await awaitable

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

    # -- key translation ------------------------------------------------------------------

    def _locate(self, key: str) -> tuple[str, Position] | None:
        return self.layout.locate(key)

    def _chunk_keys(self, shard_key: str, table: np.ndarray[Any, Any]) -> list[str]:
        shard = self.layout.parse_shard_key(shard_key)
        if shard is None:
            return []
        return [
            self.layout.chunk_key(self.layout.chunk_coords(shard, pos))
            for pos, _, _ in chunk_slices(table)
        ]

    def _covers(self, shard_key: str, positions: Collection[Position]) -> bool:
        """Whether ``positions`` include every in-bounds chunk position of the shard.

        Positions past the array edge (legal keys, but not part of the array) do not count.
        """
        shard = self.layout.parse_shard_key(shard_key)
        if shard is None:
            return False
        grid, cps = self.layout.chunk_grid_shape, self.layout.chunks_per_shard
        extent = [max(0, min(n, g - s * n)) for s, n, g in zip(shard, cps, grid, strict=True)]
        total = math.prod(extent)
        inside = sum(all(p < e for p, e in zip(pos, extent, strict=True)) for pos in positions)
        return total > 0 and inside >= total

    # -- the index cache ------------------------------------------------------------------

    async def _index(self, shard_key: str) -> _Index | None:
        entry = await self.cache.get((self._ns, shard_key), lambda: self._load_index(shard_key))
        return None if entry.missing else _Index(entry.value, entry.version)

    async def _load_index(self, shard_key: str) -> CacheEntry:
        rng = index_byte_range(self.layout.index)
        request: ByteRange = Suffix(rng.length) if rng.start is None else Range(0, rng.length)
        result = await self.inner.get_object(shard_key, request)
        if result is None:
            return IndexCache.make_entry(None, None, 0)
        table = decode_index(
            result.data, self.layout.index, shard_size=result.meta.size, key=shard_key
        )
        return IndexCache.make_entry(table, result.meta.version, table.nbytes)

    def _remember(self, shard_key: str, shard: BytesLike, version: str | None) -> None:
        """Cache the index of a shard we just wrote or read whole (no read needed).

        Only with a version: without one, data reads could not detect a later rewrite.
        """
        if version is None:
            self._forget(shard_key)
            return
        view = memoryview(shard)
        rng = index_byte_range(self.layout.index, len(view))
        table = decode_index(view[rng.as_slice()], self.layout.index, shard_size=len(view))
        self.cache.put((self._ns, shard_key), table, version, table.nbytes)

    def _empty_shard(self) -> bytes:
        """A shard with no chunks: just an index whose entries are all empty."""
        return encode_index(empty_index(self.layout.index), self.layout.index)

    def _forget(self, shard_key: str) -> None:
        self.cache.invalidate((self._ns, shard_key))

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        located = self._locate(key)
        if located is None:
            return await self.inner.get_object(key, byte_range, if_match=if_match)
        read = _ChunkRead(key, *located, byte_range, if_match)
        if if_match is not None:  # a caller's condition may fail: keep it out of batches
            [result] = await self._read_chunks([read])
            return result
        return await self._batcher.submit(read)

    async def _head(self, key: str) -> ObjectMeta | None:
        located = self._locate(key)
        if located is None:
            return await self.inner.head(key)
        shard_key, pos = located
        index = await self._index(shard_key)
        if index is None or index.table[pos][0] == EMPTY:
            return None
        return ObjectMeta(key, int(index.table[pos][1]), index.version)

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
            located = self._locate(key)
            if located is None:
                plain.append(i)
            else:
                version = if_match.get(key) if if_match else None
                chunk_items.append((i, _ChunkRead(key, *located, rng, version)))
        self.stats.requests["get"] += len(items)

        async def read_plain() -> None:
            if plain:
                values = await self.inner.get_partial_values(
                    [items[i] for i in plain], if_match=if_match
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

    async def _read_chunks(self, reads: Sequence[_ChunkRead]) -> list[GetResult | None]:
        """Read chunk ranges: indexes (cached) then one coalesced data round.

        A data read that finds its shard changed (version mismatch, or gone) drops the
        cached index and runs once more with a fresh one.
        """
        shard_keys = {r.shard_key for r in reads}
        try:
            return await retry_stale(
                lambda: self._read_chunks_once(reads), shard_keys, self._forget
            )
        except ConditionFailed as failed:  # the caller's own condition, never a stale index
            raise failed.error from None

    async def _read_chunks_once(self, reads: Sequence[_ChunkRead]) -> list[GetResult | None]:
        shard_keys = list(dict.fromkeys(r.shard_key for r in reads))
        whole = await self._read_whole_shards(shard_keys, reads)
        pending = [s for s in shard_keys if s not in whole]
        indexes = dict(zip(pending, await asyncio.gather(*map(self._index, pending)), strict=True))
        out: list[GetResult | None] = [None] * len(reads)
        fetch: list[tuple[int, Range, ObjectMeta]] = []
        for i, read in enumerate(reads):
            if read.shard_key in whole:
                out[i] = whole[read.shard_key].cut(read)
                continue
            index = indexes[read.shard_key]
            if index is None or index.table[read.pos][0] == EMPTY:
                continue
            offset, nbytes = (int(x) for x in index.table[read.pos])
            meta = ObjectMeta(read.key, nbytes, index.version)
            check_caller_condition(read.key, meta, read.if_match, False)
            start, end = resolve(read.rng, nbytes)
            fetch.append((i, Range(offset + start, offset + end), meta))
        versions = {s: i.version for s, i in indexes.items() if i is not None and i.version}
        data = await self.inner.get_partial_values(
            [(reads[i].shard_key, r) for i, r, _ in fetch], if_match=versions
        )
        for (i, r, meta), value in zip(fetch, data, strict=True):
            shard_key = reads[i].shard_key
            if value is None:  # deleted since its index was cached
                raise ConflictError(f"{shard_key}: shard disappeared", key=shard_key)
            if len(value) != r.end - r.start:
                self._forget(shard_key)
                raise CorruptShardError(
                    f"chunk bytes [{r.start}, {r.end}) lie past the end of the shard",
                    key=shard_key,
                )
            out[i] = GetResult(value, meta)
        return out

    async def _read_whole_shards(
        self, shard_keys: Sequence[str], reads: Sequence[_ChunkRead]
    ) -> dict[str, _Whole]:
        """Read in one request each shard whose index is not cached and whose every
        in-bounds chunk is requested: cheaper than index + data."""
        wanted: dict[str, set[Position]] = {}
        for read in reads:
            wanted.setdefault(read.shard_key, set()).add(read.pos)
        candidates = [
            s
            for s in shard_keys
            if self.cache.peek((self._ns, s)) is None and self._covers(s, wanted[s])
        ]
        results = await asyncio.gather(*(self.inner.get_object(s) for s in candidates))
        whole: dict[str, _Whole] = {}
        for shard_key, result in zip(candidates, results, strict=True):
            if result is None:
                whole[shard_key] = _Whole({}, None)
                continue
            chunks = decode_shard(result.data, self.layout.index, key=shard_key)
            whole[shard_key] = _Whole(chunks, result.meta.version)
            self._remember(shard_key, result.data, result.meta.version)
        return whole

    # -- writes ---------------------------------------------------------------------------

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        located = self._locate(key)
        if located is None:
            return await self.inner.set(key, data, if_match=if_match, if_absent=if_absent)
        value = bytes(data)

        def replace(current: BytesLike | None, version: str | None) -> BytesLike:
            meta = None if current is None else ObjectMeta(key, len(current), version)
            check_caller_condition(key, meta, if_match, if_absent)  # final, not a write race
            return value

        try:
            return await self._update_shard(located[0], {located[1]: replace})
        except ConditionFailed as failed:
            raise failed.error from None

    async def set_values(self, values: Mapping[str, BytesLike]) -> None:
        """Write many chunks (and pass-through keys) at once, one write per shard.

        A shard whose every in-bounds chunk is given is built without reading it.
        """
        by_shard: dict[str, dict[Position, BytesLike]] = {}
        plain: dict[str, BytesLike] = {}
        for key, value in values.items():
            located = self._locate(validate_key(key))
            if located is None:
                plain[key] = value
            else:
                by_shard.setdefault(located[0], {})[located[1]] = value
        self.stats.requests["put"] += len(values)
        jobs: list[Awaitable[Any]] = [self.inner.set(k, v) for k, v in plain.items()]
        for shard_key, chunks in by_shard.items():
            if self._covers(shard_key, chunks.keys()):
                jobs.append(self._write_whole(shard_key, chunks))
            else:
                jobs.append(
                    self._update_shard(shard_key, {p: _constant(v) for p, v in chunks.items()})
                )
        await asyncio.gather(*jobs)

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (one read-modify-write per shard) or plain objects."""
        by_shard: dict[str, dict[Position, Change]] = {}
        plain: list[tuple[str, int, BytesLike]] = []
        runs: dict[str, list[tuple[int, BytesLike]]] = {}
        for key, start, value in key_start_values:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
            located = self._locate(validate_key(key))
            if located is None:
                plain.append((key, start, value))
                continue
            runs.setdefault(key, []).append((start, value))
            by_shard.setdefault(located[0], {})[located[1]] = _patcher(runs[key])
        jobs: list[Awaitable[Any]] = [self._update_shard(s, c) for s, c in by_shard.items()]
        if plain:
            jobs.append(self.inner.set_partial_values(plain))
        await asyncio.gather(*jobs)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (deleting shards left empty) and pass-through keys."""
        by_shard: dict[str, set[Position]] = {}
        plain: list[str] = []
        for key in keys:
            located = self._locate(validate_key(key))
            if located is None:
                plain.append(key)
            else:
                by_shard.setdefault(located[0], set()).add(located[1])
        self.stats.requests["delete"] += len(plain) + sum(map(len, by_shard.values()))
        whole = [s for s, p in by_shard.items() if self._covers(s, p)]
        jobs: list[Awaitable[Any]] = [self.inner.erase_values([*plain, *whole])]
        for shard_key in whole:
            self._forget(shard_key)
        jobs.extend(
            self._update_shard(s, dict.fromkeys(p, _erase))
            for s, p in by_shard.items()
            if s not in whole
        )
        await asyncio.gather(*jobs)

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key below ``prefix``; whole-array prefixes go straight to the shards."""
        prefix = validate_prefix(prefix)
        if self._covers_all_chunks(prefix):
            await self.inner.erase_prefix(prefix)
            self.cache.invalidate_namespace(self._ns)
            return
        await self.erase_values([k async for k in self.list_prefix(prefix)])

    def _covers_all_chunks(self, prefix: str) -> bool:
        enc = self.layout.key_encoding
        root = enc.prefix + ("c" if enc.kind != "v2" else "")
        return root.startswith(prefix)

    async def _write_whole(self, shard_key: str, chunks: Mapping[Position, BytesLike]) -> None:
        shard = encode_shard(chunks, self.layout.index, order=self.write_order)
        version = await self.inner.set(shard_key, shard)
        self._remember(shard_key, shard, version)

    async def _update_shard(self, shard_key: str, changes: Mapping[Position, Change]) -> str | None:
        """Read-merge-write one shard under a conditional write, retried on conflict."""

        def rebuild(current: GetResult | None) -> bytes | None:
            chunks: dict[Position, BytesLike] = {}
            version = None
            if current is not None:
                chunks = dict(decode_shard(current.data, self.layout.index, key=shard_key))
                version = current.meta.version
            for pos, change in changes.items():
                new = change(chunks.get(pos), version)
                if new is None:
                    chunks.pop(pos, None)
                else:
                    chunks[pos] = new
            self._forget(shard_key)
            return (
                encode_shard(chunks, self.layout.index, order=self.write_order) if chunks else None
            )

        def written(shard: BytesLike | None, version: str | None) -> None:
            if shard is not None:
                self._remember(shard_key, shard, version)

        return await read_merge_write(self.inner, shard_key, rebuild, written, self._empty_shard)

    async def _delete(self, key: str) -> None:
        await self.erase_values([key])

    # -- listing --------------------------------------------------------------------------

    def _list_source(self, prefix: str) -> str:
        """The inner prefix whose shards can hold chunk keys starting with ``prefix``.

        With ``c/i/...`` keys, chunks whose first coordinate is ``i`` all live in shards
        ``c/{i // n}/...``, so listing below a row needs only that row of shards.
        """
        enc = self.layout.key_encoding
        if not prefix.startswith(enc.prefix):
            return prefix
        rest = prefix[len(enc.prefix) :]
        if enc.kind == "default" and enc.separator == "/" and rest.startswith("c/"):
            head, slash, _ = rest[2:].partition("/")
            if slash and self.layout.key_encoding.decode(f"{enc.prefix}c/{head}", 1) is not None:
                first = int(head) // self.layout.chunks_per_shard[0]
                return f"{enc.prefix}c/{first}/"
        return enc.prefix

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        source = self._list_source(prefix)
        shard_keys: list[str] = []
        async for key in self.inner.list_prefix(source):
            if self.layout.parse_shard_key(key) is not None:
                shard_keys.append(key)
            elif key.startswith(prefix):
                yield key
        for key in await self._expand(shard_keys):
            if key.startswith(prefix):
                yield key

    async def _expand(self, shard_keys: Sequence[str]) -> list[str]:
        """The existing chunk keys of the given shards (indexes read through the cache)."""
        indexes = await asyncio.gather(*map(self._index, shard_keys))
        keys: list[str] = []
        for shard_key, index in zip(shard_keys, indexes, strict=True):
            if index is not None:
                keys.extend(self._chunk_keys(shard_key, index.table))
        return keys

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        enc = self.layout.key_encoding
        nested = enc.separator == "/" and prefix.startswith(enc.prefix)
        if nested and not (enc.kind == "default" and prefix == enc.prefix):
            return await super()._list_dir(prefix)
        keys, prefixes = await self.inner.list_dir(prefix)
        shards = [k for k in keys if self.layout.parse_shard_key(k) is not None]
        plain = [k for k in keys if self.layout.parse_shard_key(k) is None]
        return sorted(plain + await self._expand(shards)), prefixes

    async def _close(self) -> None:
        await self.inner.close()


async def open_sharded(
    url_or_store: str | Store,
    array_path: str = "",
    *,
    cache: IndexCache | None = None,
    write_order: Literal["morton", "C"] = "morton",
    **store_options: Any,
) -> ShardedStore:
    """Open the sharded Zarr array at ``array_path`` of a store URL (or Store).

    ``open_sharded("s3://bucket/data", "images/raw")`` reads the array metadata and
    returns a store whose chunk keys (``images/raw/c/0/5/7``) are the inner chunks.
    """
    from asyncshard.backends.registry import open_store

    inner = (
        open_store(url_or_store, **store_options) if isinstance(url_or_store, str) else url_or_store
    )
    return await ShardedStore.open(inner, array_path, cache=cache, write_order=write_order)


@dataclass(frozen=True, slots=True)
class _Whole:
    """The chunks of a shard read whole, and its version."""

    chunks: Mapping[Position, memoryview]
    version: str | None

    def cut(self, read: _ChunkRead) -> GetResult | None:
        """The requested range of one chunk of this shard, ``None`` if it is empty."""
        chunk = self.chunks.get(read.pos)
        if chunk is None:
            return None
        meta = ObjectMeta(read.key, len(chunk), self.version)
        check_caller_condition(read.key, meta, read.if_match, False)
        start, end = resolve(read.rng, len(chunk))
        return GetResult(chunk[start:end], meta)


def _constant(value: BytesLike) -> Change:
    return lambda _current, _version: value


def _erase(_current: BytesLike | None, _version: str | None) -> None:
    return None


def _patcher(runs: Sequence[tuple[int, BytesLike]]) -> Change:
    return lambda current, _version: apply_runs(current, runs)
