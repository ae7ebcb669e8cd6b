"""Zarr v3 ``sharding_indexed`` (and the draft sharding transformer) on the sharding engine.

:class:`ZarrShardedStore` wraps any Store holding a sharded array. Keys that name inner
chunks (``arr/c/96/18``) are translated to their shard (``arr/c/3/9`` for 32x2 chunks per
shard) and a position in it; every other key passes through to the wrapped store. In
Zarr v3 inner-chunk keys and shard keys share one syntax, so inside this store every
chunk-shaped key is an inner chunk. Keys of chunks outside the array's chunk grid read
as missing and cannot be written.

The engine (:mod:`~asyncshard.sharding.engine`) does the reading, writing and listing;
:class:`ZarrFormat` supplies the one-level index (read with one request: a suffix for
``index_location: end``, the first bytes for ``start``) and the shard codec. Written
shards are compacted with their chunks in Morton order (what zarr-python writes).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Literal

from asyncshard.backends.registry import StoreLocation, keyword_names, split_options
from asyncshard.cache import CacheEntry, LoadingCache
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.health import ShardHealth
from asyncshard.formats.zarr3.grid import ShardingLayout
from asyncshard.formats.zarr3.metadata import is_sharded, parse_draft_transformer, parse_zarr3_array
from asyncshard.formats.zarr3.shard import (
    EMPTY,
    IndexArray,
    chunk_slices,
    decode_index,
    decode_shard,
    empty_index,
    encode_index,
    encode_shard,
    index_byte_range,
    inspect_shard,
)
from asyncshard.ranges import ByteRange, Range, Suffix
from asyncshard.sharding.common import folder_key, open_document, read_json
from asyncshard.sharding.engine import (
    DEFAULT_RECHECK_AFTER,
    Found,
    IndexIO,
    Location,
    ShardedAdapter,
    ShardFormat,
)
from asyncshard.store import BytesLike, Store

__all__ = ["Position", "ZarrFormat", "ZarrShardedStore", "draft_key", "open_zarr_sharded"]

#: A chunk's position in its shard (one coordinate per dimension).
Position = tuple[int, ...]


class ZarrFormat(ShardFormat[Position, IndexArray]):
    """The Zarr sharding layout of one array: chunks are positions in their shard."""

    kind: ClassVar[str] = "zarr"

    def __init__(self, layout: ShardingLayout, write_order: Literal["morton", "C"]) -> None:
        self.layout = layout
        self.write_order = write_order
        enc = layout.key_encoding
        self._chunk_root = enc.prefix + ("c" if enc.kind != "v2" else "")
        self._grid = layout.grid

    # -- keys -------------------------------------------------------------------------

    def locate(self, key: str) -> Location[Position] | None:
        coords = self.layout.parse_chunk_key(key)
        if coords is None:
            return None
        shard, position, inside = self._grid.place(coords)
        return Location(self.layout.key_encoding.encode(shard), position, inside)

    def is_shard(self, inner_key: str) -> bool:
        shard = self.layout.parse_shard_key(inner_key)
        return shard is not None and self._grid.object_in_bounds(shard)

    def is_whole(self, shard_key: str, chunks: Collection[Position]) -> bool:
        """Whether ``chunks`` include every in-bounds position of the shard."""
        shard = self.layout.parse_shard_key(shard_key)
        return shard is not None and self._grid.holds_all(shard, chunks)

    def whole_count(self, shard_key: str) -> int | None:
        shard = self.layout.parse_shard_key(shard_key)
        return None if shard is None else self._grid.count_in(shard)

    # -- indexes ----------------------------------------------------------------------

    async def find(
        self, io: IndexIO, shard_key: str, chunks: Sequence[Position]
    ) -> Found[Position]:
        entry = await io.cached(("index", shard_key), lambda: self._load(io, shard_key))
        if entry.missing:
            return Found(False, None, {}, entry.loaded_at)
        entries: dict[Position, tuple[int, int]] = {}
        for pos in chunks:
            where = self.lookup(io, shard_key, entry.value, pos)
            if where is not None:
                entries[pos] = where
        return Found(True, entry.version, entries, entry.loaded_at)

    def lookup(
        self, io: IndexIO, shard_key: str, index: IndexArray, chunk: Position
    ) -> tuple[int, int] | None:
        offset, nbytes = index[chunk].tolist()
        return None if offset == EMPTY else (offset, offset + nbytes)

    async def _load(self, io: IndexIO, shard_key: str) -> CacheEntry:
        rng = index_byte_range(self.layout.index)
        request: ByteRange = Suffix(rng.length) if rng.start is None else Range(0, rng.length)
        result = await io.store.get_object(shard_key, request)
        if result is None:
            return LoadingCache.make_entry(None, None, 0)
        table = decode_index(
            result.data, self.layout.index, shard_size=result.meta.size, key=shard_key
        )
        return LoadingCache.make_entry(table, result.meta.version, table.nbytes)

    def remember(self, io: IndexIO, shard_key: str, shard: memoryview, version: str) -> None:
        rng = index_byte_range(self.layout.index, len(shard))
        table = decode_index(shard[rng.as_slice()], self.layout.index, shard_size=len(shard))
        io.put(("index", shard_key), table, version, table.nbytes)

    async def chunks_in(self, io: IndexIO, shard_key: str) -> list[Position]:
        entry = await io.cached(("index", shard_key), lambda: self._load(io, shard_key))
        if entry.missing:
            return []
        return [pos for pos, _, _ in chunk_slices(entry.value)]

    # -- shards -----------------------------------------------------------------------

    def split(self, shard_key: str, shard: memoryview) -> dict[Position, memoryview]:
        return dict(decode_shard(shard, self.layout.index, key=shard_key))

    def inspect(self, shard_key: str, shard: memoryview) -> ShardHealth[Position]:
        layout = self.layout
        return inspect_shard(
            shard, layout.index, chunk_checksum=layout.chunk_checksum, key=shard_key
        )

    def build(self, shard_key: str, chunks: Mapping[Position, BytesLike]) -> bytes:
        return encode_shard(chunks, self.layout.index, order=self.write_order)

    def empty_shard(self) -> bytes:
        return encode_index(empty_index(self.layout.index), self.layout.index)

    # -- listing ----------------------------------------------------------------------

    def chunk_key(self, shard_key: str, chunk: Position) -> str | None:
        shard = self.layout.parse_shard_key(shard_key)
        if shard is None:
            return None
        coords = self._grid.chunk_coords(shard, chunk)
        return self.layout.chunk_key(coords) if self._grid.chunk_in_bounds(coords) else None

    def list_source(self, prefix: str) -> str:
        """The shards that can hold chunk keys starting with ``prefix``.

        With ``c/i/...`` keys, chunks whose first coordinate is ``i`` all live in shards
        ``c/{i // n}/...``, so listing below a row needs only that row of shards.
        """
        enc = self.layout.key_encoding
        if not prefix.startswith(enc.prefix):
            return prefix
        rest = prefix[len(enc.prefix) :]
        if enc.kind == "default" and enc.separator == "/" and rest.startswith("c/"):
            head, slash, _ = rest[2:].partition("/")
            if slash and enc.decode(f"{enc.prefix}c/{head}", 1) is not None:
                first = int(head) // self.layout.chunks_per_shard[0]
                return f"{enc.prefix}c/{first}/"
        return enc.prefix

    def walks(self, folder: str) -> bool:
        enc = self.layout.key_encoding
        nested = enc.separator == "/" and folder.startswith(enc.prefix)
        return nested and not (enc.kind == "default" and folder == enc.prefix)

    def holds_every_chunk(self, prefix: str) -> bool:
        return self._chunk_root.startswith(prefix)

    def is_chunk_folder(self, folder: str) -> bool:
        """``c/``, ``c/i/``, ... below the array (nested keys): folders of chunk keys whose
        leading coordinates lie in the chunk grid."""
        enc = self.layout.key_encoding
        root = self._chunk_root + enc.separator
        if enc.separator != "/" or enc.kind == "v2" or not folder.startswith(root):
            return False
        parts = folder[len(root) :].split("/")[:-1]
        grid = self.layout.chunk_grid_shape
        if len(parts) >= len(grid):
            return False
        coords = enc.decode(enc.prefix + "c/" + "/".join(parts), len(parts)) if parts else ()
        return coords is not None and all(c < g for c, g in zip(coords, grid, strict=False))


class ZarrShardedStore(ShardedAdapter[Position]):
    """A Store whose chunk keys are the inner chunks of a sharded Zarr array.

    Args:
        inner: the store holding the array.
        layout: the array's sharding layout (:meth:`open` reads it from the metadata).
        cache: where decoded shard indexes are kept (default: the process-wide cache).
        write_order: order of chunk data in written shards (``"morton"``: zarr-python's).
        recheck_after: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        data_cache: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        lean_reads: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
    """

    def __init__(
        self,
        inner: Store,
        layout: ShardingLayout,
        *,
        cache: LoadingCache | None = None,
        write_order: Literal["morton", "C"] = "morton",
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: LoadingCache | None = None,
        lean_reads: bool = True,
    ) -> None:
        super().__init__(
            inner,
            ZarrFormat(layout, write_order),
            cache=cache,
            recheck_after=recheck_after,
            data_cache=data_cache,
            lean_reads=lean_reads,
        )
        self.layout = layout
        self.write_order = write_order

    def __repr__(self) -> str:
        return f"ZarrShardedStore({self.inner!r}, chunks_per_shard={self.layout.chunks_per_shard})"

    @classmethod
    async def open(
        cls,
        inner: StoreLocation,
        array_path: str = "",
        *,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> ZarrShardedStore:
        """Open the sharded array at ``array_path`` of ``inner`` from its metadata.

        Reads ``<array_path>/zarr.json`` (Zarr v3 ``sharding_indexed``) or, failing that,
        ``meta/root/<array_path>.array.json`` (the draft sharding storage transformer).
        ``inner`` is any location of :func:`~asyncshard.open_store`; keywords the store
        does not take are storage options for it.
        """
        options, storage = split_options(options, keyword_names(cls))
        store, path, meta_key, doc = await open_document(
            inner, storage_options, storage, array_path, "zarr.json"
        )
        if doc is not None:
            if not is_sharded(doc):
                raise InvalidMetadataError(f"{meta_key}: codecs: the array is not sharded")
            layout = parse_zarr3_array(doc, key_prefix=folder_key(path, ""))
            return cls(store, layout, **options)
        draft = draft_key(path)
        doc = await read_json(store, draft)
        if doc is not None:
            return cls(store, parse_draft_transformer(doc, path), **options)
        raise InvalidMetadataError(f"no array metadata at {meta_key} or {draft}")


def draft_key(path: str) -> str:
    """The key of the draft sharding storage transformer's metadata of the array at
    ``path`` (no slash at either end)."""
    return f"meta/root/{path}.array.json" if path else "meta/root.array.json"


async def open_zarr_sharded(inner: Store, array_path: str, **options: Any) -> ZarrShardedStore:
    """:meth:`ZarrShardedStore.open` as a function."""
    return await ZarrShardedStore.open(inner, array_path, **options)
