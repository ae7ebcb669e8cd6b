"""Zarr chunk arithmetic, once: the chunk grid, the objects that hold it, and shard keys.

:class:`ChunkGrid` is the one home of the arithmetic between an array's (inner) chunk
grid and the grid of the objects that store it: shards of ``per_object`` chunks, or the
chunks themselves (``per_object`` all ones, a flat array). Positions within an object,
clipping at the array's edge and bounds checks live here and nowhere else.

:class:`ShardingLayout` is a sharded array's geometry and key translation: inner-chunk
keys (the array's chunk key encoding over the inner-chunk grid) to shard keys (the same
encoding over the shard grid) and positions within the shard. Everything here is pure.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding, Coords, CoordsLike
from asyncshard.formats.zarr3.shard import IndexLayout

__all__ = ["MAX_CHUNKS_PER_SHARD", "ChunkGrid", "ShardingLayout"]

#: More inner chunks per shard than this is refused: its index alone would be 256 MiB.
MAX_CHUNKS_PER_SHARD = 2**24
#: Array dimensions are int64, as in zarr-python and tensorstore.
_INT64_END = 2**63


def _checked(coords: CoordsLike, ndim: int, what: str) -> Coords:
    if (  # the common case, checked fast
        type(coords) is tuple
        and len(coords) == ndim
        and all(type(c) is int and c >= 0 for c in coords)
    ):
        return coords
    try:
        out = tuple(operator.index(c) for c in coords)
    except TypeError:
        raise ValueError(f"{what} {tuple(coords)} are not integers") from None
    if len(out) != ndim or any(c < 0 for c in out):
        raise ValueError(f"{what} {tuple(coords)} is not {ndim} non-negative ints")
    return out


def _inside(coords: CoordsLike, grid: Coords) -> bool:
    return len(coords) == len(grid) and all(
        0 <= operator.index(c) < g for c, g in zip(coords, grid, strict=True)
    )


@dataclass(frozen=True)
class ChunkGrid:
    """An array's chunk grid and the grid of objects (shards, or flat chunks) over it.

    ``shape``: the array's shape; ``chunk_shape``: the (inner) chunk shape;
    ``per_object``: chunks per object along each dimension (all ones: flat).
    """

    shape: Coords
    chunk_shape: Coords
    per_object: Coords

    @functools.cached_property
    def ndim(self) -> int:
        """Number of array dimensions."""
        return len(self.shape)

    @functools.cached_property
    def chunk_grid(self) -> Coords:
        """Number of (inner) chunks along each dimension (ceil division)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    @functools.cached_property
    def object_grid(self) -> Coords:
        """Number of objects along each dimension (ceil division)."""
        return tuple(-(-g // n) for g, n in zip(self.chunk_grid, self.per_object, strict=True))

    def chunk_in_bounds(self, coords: CoordsLike) -> bool:
        """Whether the chunk at ``coords`` overlaps the array."""
        return _inside(coords, self.chunk_grid)

    def object_in_bounds(self, coords: CoordsLike) -> bool:
        """Whether the object at ``coords`` overlaps the array."""
        return _inside(coords, self.object_grid)

    def object_of(self, chunk: CoordsLike) -> tuple[Coords, Coords]:
        """``(object coords, position in the object)`` of the chunk at ``chunk``."""
        c = _checked(chunk, self.ndim, "chunk coords")
        per = self.per_object
        objects = tuple(x // n for x, n in zip(c, per, strict=True))
        return objects, tuple(x % n for x, n in zip(c, per, strict=True))

    def place(self, chunk: Coords) -> tuple[Coords, Coords, bool]:
        """``(object coords, position in the object, inside the array)`` of a parsed
        chunk key's coords (``ndim`` non-negative ints): :meth:`object_of` and
        :meth:`chunk_in_bounds` in one pass, for the read path."""
        obj: list[int] = []
        pos: list[int] = []
        inside = True
        for x, n, g in zip(chunk, self.per_object, self.chunk_grid, strict=True):
            q, r = divmod(x, n)
            obj.append(q)
            pos.append(r)
            inside = inside and x < g
        return tuple(obj), tuple(pos), inside

    def chunk_coords(self, obj: CoordsLike, position: CoordsLike) -> Coords:
        """Inverse of :meth:`object_of`: chunk coords from object coords and position."""
        o = _checked(obj, self.ndim, "shard coords")
        p = _checked(position, self.ndim, "position")
        per = self.per_object
        if any(x >= n for x, n in zip(p, per, strict=True)):
            raise ValueError(f"position {p} is outside chunks_per_shard {per}")
        return tuple(a * n + b for a, n, b in zip(o, per, p, strict=True))

    def chunk_range(self, obj: CoordsLike) -> tuple[Coords, Coords]:
        """``[lo, hi)`` of the chunk grid covered by an object, clipped to the array."""
        o = _checked(obj, self.ndim, "shard coords")
        lo = tuple(a * n for a, n in zip(o, self.per_object, strict=True))
        hi = tuple(
            max(a, min(a + n, g))
            for a, n, g in zip(lo, self.per_object, self.chunk_grid, strict=True)
        )
        return lo, hi

    def chunks_at(self, obj: CoordsLike, positions: npt.NDArray[np.intp]) -> list[Coords]:
        """Chunk coords of the ``positions`` (rows: positions in object ``obj``, as
        ``np.argwhere`` gives them) that overlap the array, in their order."""
        lo, hi = self.chunk_range(obj)
        extent = np.array([b - a for a, b in zip(lo, hi, strict=True)], dtype=np.int64)
        rows = positions.reshape(len(positions), self.ndim)
        rows = rows[(rows < extent).all(axis=1)]
        return [  # offsets added in Python ints: no int64 overflow at the grid's end
            tuple(p + a for p, a in zip(row, lo, strict=True)) for row in rows.tolist()
        ]

    def extent(self, obj: CoordsLike) -> Coords:
        """Chunks of the object inside the array, along each dimension (0 outside)."""
        lo, hi = self.chunk_range(obj)
        return tuple(b - a for a, b in zip(lo, hi, strict=True))

    def chunks_in_object(self, obj: CoordsLike) -> list[Coords]:
        """Chunk coords (C order) of an object that lie inside the array.

        Edge objects hold fewer chunks than ``per_object``; one outside the array none.
        """
        lo, _ = self.chunk_range(obj)
        if self.ndim == 0:
            return [()]
        cells = np.indices(self.extent(obj)).reshape(self.ndim, -1).T + np.asarray(lo)
        return [tuple(row) for row in cells.tolist()]

    def count_in(self, obj: CoordsLike) -> int:
        """How many chunks of the object lie inside the array."""
        return math.prod(self.extent(obj))

    def holds_all(self, obj: CoordsLike, positions: Collection[Coords]) -> bool:
        """Whether ``positions`` (in the object) include every in-bounds chunk of it."""
        extent = self.extent(obj)
        total = math.prod(extent)
        if total == 0 or len(positions) < total:
            return False  # a shard's writes are counted on each arrival: no scan until then
        distinct = set(positions)
        inside = sum(all(p < e for p, e in zip(pos, extent, strict=True)) for pos in distinct)
        return total > 0 and inside >= total

    def objects_over(self, lo: CoordsLike, hi: CoordsLike) -> list[Coords]:
        """The objects holding the chunks of the box ``[lo, hi)`` of the chunk grid, in
        C order (none for an empty box)."""
        lo, hi = _checked(lo, self.ndim, "chunk coords"), _checked(hi, self.ndim, "chunk coords")
        if any(b <= a for a, b in zip(lo, hi, strict=True)):
            return []
        first = self.object_of(lo)[0]
        last = self.object_of(tuple(h - 1 for h in hi))[0]
        return list(itertools.product(*(range(a, b + 1) for a, b in zip(first, last, strict=True))))

    def group_by_object(self, chunks: npt.NDArray[np.int64]) -> list[tuple[Coords, list[int]]]:
        """Rows of ``chunks`` (``(n, ndim)`` chunk coords) grouped by the object holding
        them: ``(object coords, row numbers in their order)``, in object order."""
        if not len(chunks):
            return []
        if not self.ndim:  # 0-d: one object
            return [((), list(range(len(chunks))))]
        objects, _ = self.split_chunk_coords(chunks)
        order = np.lexsort(objects.T[::-1])  # stable: by object, then by row
        ordered = objects[order]
        starts = np.flatnonzero(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)])
        ends = [*starts[1:].tolist(), len(chunks)]
        picks: list[int] = order.tolist()
        return [
            (tuple(ordered[a].tolist()), picks[a:b])
            for a, b in zip(starts.tolist(), ends, strict=True)
        ]

    def split_chunk_coords(
        self, coords: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Vectorised :meth:`object_of`: ``(n, ndim)`` coords -> object coords and positions."""
        arr = np.asarray(coords, dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != self.ndim:
            raise ValueError(f"expected chunk coords of shape (n, {self.ndim}), got {arr.shape}")
        if (arr < 0).any():
            raise ValueError("chunk coords must be non-negative")
        objects, positions = np.divmod(arr, np.asarray(self.per_object, dtype=np.int64))
        return objects, positions


@dataclass(frozen=True)
class ShardingLayout:
    """A sharded array's geometry and key translation (inner-chunk keys <-> shard keys).

    The arithmetic is its :attr:`grid`'s; this adds the shard shape, the index layout
    and the keys.
    """

    shape: Coords
    shard_shape: Coords
    chunk_shape: Coords
    chunks_per_shard: Coords
    index: IndexLayout
    key_encoding: ChunkKeyEncoding = field(default_factory=ChunkKeyEncoding)
    #: Whether the inner codecs end with ``crc32c``: each stored chunk ends with the
    #: crc32c of the bytes before it.
    chunk_checksum: bool = False

    def __post_init__(self) -> None:
        ndim = len(self.shape)
        shapes = (self.shard_shape, self.chunk_shape, self.chunks_per_shard)
        if any(v >= _INT64_END for dims in (self.shape, *shapes) for v in dims):
            raise InvalidMetadataError("array dimensions must be below 2**63 (int64)")
        if any(len(s) != ndim for s in shapes):
            raise InvalidMetadataError(
                f"shape, shard_shape, chunk_shape and chunks_per_shard must all have "
                f"{ndim} dimensions"
            )
        if any(s < 0 for s in self.shape) or any(c <= 0 for c in self.chunk_shape):
            raise InvalidMetadataError("shape must be >= 0 and chunk_shape > 0")
        product = tuple(c * n for c, n in zip(self.chunk_shape, self.chunks_per_shard, strict=True))
        if product != self.shard_shape:
            raise InvalidMetadataError(
                f"shard_shape {self.shard_shape} != chunk_shape {self.chunk_shape} * "
                f"chunks_per_shard {self.chunks_per_shard}"
            )
        n_chunks = math.prod(self.chunks_per_shard)
        if n_chunks > MAX_CHUNKS_PER_SHARD:
            raise InvalidMetadataError(
                f"chunks_per_shard {list(self.chunks_per_shard)}: {n_chunks} inner chunks per "
                f"shard exceeds the supported {MAX_CHUNKS_PER_SHARD}"
            )
        if self.index.chunks_per_shard != self.chunks_per_shard:
            raise InvalidMetadataError("index.chunks_per_shard differs from chunks_per_shard")

    @functools.cached_property
    def grid(self) -> ChunkGrid:
        """The inner-chunk grid and the shard grid over it."""
        return ChunkGrid(self.shape, self.chunk_shape, self.chunks_per_shard)

    @functools.cached_property
    def ndim(self) -> int:
        """Number of array dimensions."""
        return len(self.shape)

    @property
    def chunk_grid_shape(self) -> Coords:
        """Number of inner chunks along each dimension."""
        return self.grid.chunk_grid

    @property
    def shard_grid_shape(self) -> Coords:
        """Number of shards along each dimension."""
        return self.grid.object_grid

    def chunk_key(self, coords: CoordsLike) -> str:
        """Key of the inner chunk at ``coords`` (inner-chunk grid)."""
        return self.key_encoding.encode(_checked(coords, self.ndim, "chunk coords"))

    def parse_chunk_key(self, key: str) -> Coords | None:
        """Inner-chunk coords of ``key``, or ``None`` if it is not a chunk key of this array.

        Syntax only: coords past the current array bounds are returned (arrays can be
        resized); use :meth:`ChunkGrid.chunk_in_bounds` to check them.
        """
        return self.key_encoding.decode(key, self.ndim)

    def shard_key(self, shard_coords: CoordsLike) -> str:
        """Key of the shard at ``shard_coords`` (shard grid)."""
        return self.key_encoding.encode(_checked(shard_coords, self.ndim, "shard coords"))

    def parse_shard_key(self, key: str) -> Coords | None:
        """Shard coords of ``key``, or ``None`` (shard keys share the chunk key syntax)."""
        return self.key_encoding.decode(key, self.ndim)

    def locate(self, chunk_key: str) -> tuple[str, Coords] | None:
        """``(shard_key, position_in_shard)`` for an inner-chunk key, ``None`` otherwise."""
        coords = self.parse_chunk_key(chunk_key)
        if coords is None:
            return None
        shard, position = self.grid.object_of(coords)
        return self.key_encoding.encode(shard), position
