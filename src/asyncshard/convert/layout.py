"""Array layouts for conversion: flat or sharded, and the key encoding of their objects.

Pure: ``zarr.json`` documents in, :class:`ArrayLayout` and new documents out.

A layout names *objects*: flat chunks (the chunk grid) or shards (the shard grid). Both
use the array's chunk key encoding (a prefix-free
:class:`~asyncshard.formats.zarr3.metadata.ChunkKeyEncoding`), so a flat chunk and a
shard at the same grid coordinates have the same key. :func:`partner` gives, for every
encoding and number of dimensions, a nested (``/``) encoding whose keys never equal the
original's; every pass of a conversion writes the new layout under such a disjoint
encoding (see :mod:`asyncshard.convert.zarr`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from asyncshard.formats.zarr3.documents import sharded_metadata, unsharded_metadata
from asyncshard.formats.zarr3.grid import ChunkGrid, ShardingLayout
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding, Coords
from asyncshard.formats.zarr3.metadata import is_sharded, parse_zarr3_array
from asyncshard.formats.zarr3.shard import IndexArray, IndexLayout, index_byte_range, present_mask
from asyncshard.ranges import ByteRange, Range, Suffix

__all__ = [
    "MANIFEST_ATTRIBUTE",
    "ArrayLayout",
    "IndexLocation",
    "disjoint",
    "encoding_json",
    "layout_doc",
    "partner",
    "read_layout",
    "retarget",
    "same_layout",
]

IndexLocation = Literal["start", "end"]

#: The attribute holding the sorted list of stored chunk keys (zarr-vectors manifest).
MANIFEST_ATTRIBUTE = "nonempty_chunks"


def encoding_json(encoding: ChunkKeyEncoding) -> dict[str, Any]:
    """The ``chunk_key_encoding`` member of a ``zarr.json`` for ``encoding``."""
    return {"name": encoding.kind, "configuration": {"separator": encoding.separator}}


def disjoint(a: ChunkKeyEncoding, b: ChunkKeyEncoding, ndim: int) -> bool:
    """Whether no key of encoding ``a`` equals a key of ``b`` for ``ndim`` dimensions.

    Default keys start with ``c``, v2 keys with a digit: two kinds never meet. Within a
    kind the separator tells keys apart only when it appears in them: from one dimension
    on for ``default`` (``c/0`` vs ``c.0``), from two on for ``v2``.
    """
    if a.kind != b.kind:
        return True
    if a.separator == b.separator:
        return False
    return ndim >= (1 if a.kind == "default" else 2)


def partner(encoding: ChunkKeyEncoding, ndim: int) -> ChunkKeyEncoding:
    """The encoding a conversion that keeps ``encoding`` stages its first pass in, always
    with the ``/`` separator (nested: a folder holds at most one row of the grid, the
    chunks along the last axis, never every object of the pass): the same kind when
    ``encoding`` uses ``.`` (``c.i.j`` staged as ``c/i/j``; ``i.j`` as ``i/j``) and
    that is disjoint from it, else the other kind (``c/i/j`` staged as ``i/j`` and back;
    0-d and 1-d ``v2`` arrays). Default keys start with ``c``, ``v2`` keys with a digit,
    so the other kind is disjoint at every ``ndim``; neither names ``zarr.json`` nor the
    conversion journal, the other objects of an array's folder."""
    nested = ChunkKeyEncoding(encoding.kind, "/")
    if disjoint(encoding, nested, ndim):
        return nested
    return ChunkKeyEncoding("v2" if encoding.kind == "default" else "default", "/")


@dataclass(frozen=True)
class ArrayLayout:
    """Where an array's objects are: flat chunks or shards, and their keys.

    ``chunk_shape`` is the flat chunk shape or the inner chunk shape of a sharded array;
    ``chunks_per_shard`` is ``None`` for a flat array.
    """

    prefix: str
    shape: Coords
    chunk_shape: Coords
    chunks_per_shard: Coords | None
    encoding: ChunkKeyEncoding
    index: IndexLayout | None

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def sharded(self) -> bool:
        """Whether objects are shards."""
        return self.chunks_per_shard is not None

    @property
    def cps(self) -> Coords:
        """Chunks per object along each dimension (all ones for a flat array)."""
        return self.chunks_per_shard or (1,) * self.ndim

    @functools.cached_property
    def grid(self) -> ChunkGrid:
        """The chunk arithmetic: the (inner) chunk grid and the object grid over it."""
        return ChunkGrid(self.shape, self.chunk_shape, self.cps)

    @property
    def chunk_grid(self) -> Coords:
        """Number of (inner) chunks along each dimension."""
        return self.grid.chunk_grid

    @property
    def object_grid(self) -> Coords:
        """Number of objects (chunks or shards) along each dimension."""
        return self.grid.object_grid

    @functools.cached_property
    def keys(self) -> ChunkKeyEncoding:
        """The key encoder of objects (full keys, with the array prefix)."""
        return replace(self.encoding, prefix=self.prefix)

    def object_key(self, coords: Sequence[int]) -> str:
        """Full key of the object at ``coords`` of the object grid."""
        return self.keys.encode(coords)

    def parse_object_key(self, key: str) -> Coords | None:
        """Object coords named by a full key (syntax only, bounds not checked)."""
        return self.keys.decode(key, self.ndim)

    def manifest_key(self, chunk: Sequence[int]) -> str:
        """The chunk key of ``chunk`` as listed in the manifest (relative to the array)."""
        return self.encoding.encode(chunk)

    def index_request(self) -> ByteRange:
        """The byte range to read to get a shard's index (a suffix when it is at the end)."""
        if self.index is None:
            raise ValueError("a flat layout has no shard index")
        rng = index_byte_range(self.index)
        if rng.start is None:
            return Suffix(rng.length)
        return Range(rng.start, rng.start + rng.length)

    def present_chunks(self, shard: Coords, index: IndexArray) -> list[Coords]:
        """Chunk coordinates of a shard that its decoded ``index`` holds, inside the array."""
        return self.grid.chunks_at(shard, np.argwhere(present_mask(index)))

    def sharding(self) -> ShardingLayout:
        """The :class:`ShardingLayout` of a sharded layout (for :class:`ZarrShardedStore`)."""
        if self.chunks_per_shard is None or self.index is None:
            raise ValueError("a flat layout has no sharding")
        shard_shape = tuple(
            c * n for c, n in zip(self.chunk_shape, self.chunks_per_shard, strict=True)
        )
        return ShardingLayout(
            self.shape,
            shard_shape,
            self.chunk_shape,
            self.chunks_per_shard,
            self.index,
            self.keys,
        )

    def describe(self) -> str:
        """Short human description, e.g. ``sharded 4x4 (c.0.1)`` or ``flat (c/0/1)``."""
        example = self.encoding.encode(tuple(range(self.ndim)))
        if self.chunks_per_shard is None:
            return f"flat ({example})"
        cps = "x".join(map(str, self.chunks_per_shard)) or "()"
        return f"sharded {cps} ({example})"


def read_layout(doc: Mapping[str, Any], prefix: str = "") -> ArrayLayout:
    """The layout of a Zarr v3 array document; ``InvalidMetadataError`` if unsupported.

    Supported: a regular chunk grid, ``default`` or ``v2`` keys, and either no sharding
    or ``sharding_indexed`` as the only codec (what :mod:`asyncshard.formats.zarr3.metadata`
    parses).
    """
    if is_sharded(doc):
        sharded = parse_zarr3_array(doc, key_prefix=prefix)
        cps: Coords | None = sharded.chunks_per_shard
        index: IndexLayout | None = sharded.index
    else:
        ndim = len(doc.get("shape", ()))
        sharded = parse_zarr3_array(sharded_metadata(doc, (1,) * ndim), key_prefix=prefix)
        cps, index = None, None
    encoding = replace(sharded.key_encoding, prefix="")
    return ArrayLayout(prefix, sharded.shape, sharded.chunk_shape, cps, encoding, index)


def retarget(
    doc: Mapping[str, Any],
    chunks_per_shard: Sequence[int] | None,
    encoding: ChunkKeyEncoding,
    *,
    index_location: IndexLocation = "end",
    checksum: bool = True,
) -> dict[str, Any]:
    """``doc`` rewritten to a new layout: flat (``None``) or sharded, with ``encoding``.

    Chunk bytes are not re-encoded: the flat codecs become the inner codecs and back
    (:func:`sharded_metadata` / :func:`unsharded_metadata`). Attributes are kept.
    """
    flat = unsharded_metadata(doc) if is_sharded(doc) else copy.deepcopy(dict(doc))
    if chunks_per_shard is None:
        out = flat
    else:
        out = sharded_metadata(
            flat, chunks_per_shard, index_location=index_location, checksum=checksum
        )
    out["chunk_key_encoding"] = encoding_json(encoding)
    return out


def layout_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The members of ``doc`` that define the stored layout (all but ``attributes``)."""
    return {k: v for k, v in doc.items() if k != "attributes"}


def same_layout(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two array documents describe the same stored objects."""
    return layout_doc(a) == layout_doc(b)
