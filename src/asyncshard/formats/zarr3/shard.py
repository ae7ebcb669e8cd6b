"""Pure encoding and decoding of Zarr shards (``sharding_indexed`` and the draft transformer).

A shard is one storage object holding the encoded bytes of up to ``n`` inner chunks plus an
index of ``n`` ``(offset, nbytes)`` uint64 pairs in C order over the ``chunks_per_shard``
grid, optionally followed by a crc32c checksum (4 bytes, little-endian). Empty chunks have
``offset == nbytes == 2**64 - 1``. The index sits at the start or the end of the object;
offsets are always absolute in the object.

Nothing here does I/O or awaits: bytes and numpy arrays in, bytes and numpy arrays out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import crc32c
import numpy as np
import numpy.typing as npt

from asyncshard.buffers import BytesLike
from asyncshard.errors import ChecksumError, CorruptShardError, FormatError
from asyncshard.formats.health import ShardHealth, overlapping
from asyncshard.formats.morton import morton_order, morton_rank

__all__ = [
    "EMPTY",
    "IndexArray",
    "IndexLayout",
    "IndexRange",
    "chunk_slices",
    "decode_index",
    "decode_shard",
    "empty_index",
    "encode_index",
    "encode_shard",
    "index_byte_range",
    "inspect_shard",
    "morton_order",
    "present_mask",
    "shard_chunks",
]

EMPTY = 2**64 - 1
"""Offset and nbytes of an empty (missing) inner chunk."""

_ENTRY_NBYTES = 16
_CHECKSUM_NBYTES = 4
_EMPTY_U64 = np.uint64(EMPTY)

IndexArray = npt.NDArray[np.uint64]
_Pos = TypeVar("_Pos", bound=tuple[int, ...])


@dataclass(frozen=True)
class IndexLayout:
    """How a shard's index is shaped, encoded and placed; everything derives from config."""

    chunks_per_shard: tuple[int, ...]
    endian: Literal["little", "big"] = "little"
    checksum: bool = True
    location: Literal["start", "end"] = "end"

    def __post_init__(self) -> None:
        cps = self.chunks_per_shard
        if not isinstance(cps, tuple) or not all(_is_int(c) and c > 0 for c in cps):
            raise ValueError(f"chunks_per_shard must be a tuple of positive ints, got {cps!r}")
        object.__setattr__(self, "chunks_per_shard", tuple(int(c) for c in cps))
        if self.endian not in ("little", "big"):
            raise ValueError(f"endian must be 'little' or 'big', got {self.endian!r}")
        if self.location not in ("start", "end"):
            raise ValueError(f"location must be 'start' or 'end', got {self.location!r}")

    @property
    def ndim(self) -> int:
        """Number of dimensions of the inner-chunk grid."""
        return len(self.chunks_per_shard)

    @property
    def n_chunks(self) -> int:
        """Number of index entries (inner chunks per shard, edge shards included)."""
        return math.prod(self.chunks_per_shard)

    @property
    def index_nbytes(self) -> int:
        """Encoded size of the index: ``16 * n_chunks`` plus 4 with a checksum."""
        return _ENTRY_NBYTES * self.n_chunks + (_CHECKSUM_NBYTES if self.checksum else 0)

    @property
    def dtype(self) -> np.dtype[np.uint64]:
        """The numpy dtype of index entries as stored."""
        return np.dtype("<u8" if self.endian == "little" else ">u8")

    def data_region(self, shard_size: int) -> tuple[int, int]:
        """``[start, end)`` of the bytes that inner chunks may occupy in a shard of this size."""
        if self.location == "start":
            return self.index_nbytes, shard_size
        return 0, shard_size - self.index_nbytes


@dataclass(frozen=True)
class IndexRange:
    """The bytes to request to read a shard's index.

    ``start is None`` means a suffix: the last ``length`` bytes of the object. Otherwise the
    bytes ``[start, start + length)``.
    """

    start: int | None
    length: int

    @property
    def is_suffix(self) -> bool:
        """Whether this is a suffix request (object size not needed)."""
        return self.start is None

    @property
    def end(self) -> int | None:
        """Exclusive end offset, or ``None`` for a suffix."""
        return None if self.start is None else self.start + self.length

    def as_slice(self) -> slice:
        """A slice that cuts these bytes out of the whole object held in memory."""
        if self.start is None:
            return slice(-self.length, None) if self.length else slice(0, 0)
        return slice(self.start, self.start + self.length)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _as_view(buf: BytesLike) -> memoryview:
    """A flat byte view of ``buf`` (zero-copy when it is contiguous)."""
    view = memoryview(buf)
    if view.ndim == 1 and view.format in ("B", "b", "c") and view.c_contiguous:
        return view if view.format == "B" else view.cast("B")
    if view.c_contiguous:
        return view.cast("B")
    return memoryview(view.tobytes())


def index_byte_range(
    layout: IndexLayout, shard_size: int | None = None, *, key: str | None = None
) -> IndexRange:
    """What to read to get the index: first ``index_nbytes`` bytes, or the last ones.

    For ``location="end"`` without a known ``shard_size`` this is a suffix request; with a
    known size it is an explicit range. A shard smaller than the index is corrupt.
    """
    n = layout.index_nbytes
    if shard_size is not None and shard_size < n:
        raise CorruptShardError(
            f"shard is {shard_size} bytes, smaller than its {n}-byte index", key=key
        )
    if layout.location == "start":
        return IndexRange(0, n)
    if shard_size is None:
        return IndexRange(None, n)
    return IndexRange(shard_size - n, n)


def empty_index(layout: IndexLayout) -> IndexArray:
    """A fresh, writable index with every entry empty, shape ``(*chunks_per_shard, 2)``."""
    return np.full((*layout.chunks_per_shard, 2), EMPTY, dtype=np.uint64)


def present_mask(index: IndexArray) -> npt.NDArray[np.bool_]:
    """Boolean array of shape ``chunks_per_shard``: which inner chunks are present."""
    mask: npt.NDArray[np.bool_] = (index[..., 0] != _EMPTY_U64) & (index[..., 1] != _EMPTY_U64)
    return mask


def chunk_slices(index: IndexArray) -> Iterator[tuple[tuple[int, ...], int, int]]:
    """Yield ``(position, offset, nbytes)`` for each present chunk, in C order."""
    mask = present_mask(index)
    positions = np.argwhere(mask)
    offsets = index[..., 0][mask]
    sizes = index[..., 1][mask]
    for pos, off, size in zip(positions.tolist(), offsets.tolist(), sizes.tolist(), strict=True):
        yield tuple(pos), off, size


def _checked_index_array(index: npt.ArrayLike, layout: IndexLayout) -> npt.NDArray[np.integer[Any]]:
    arr = np.asarray(index)
    if arr.shape not in ((*layout.chunks_per_shard, 2), (layout.n_chunks, 2)):
        raise ValueError(
            f"index shape {arr.shape} does not match chunks_per_shard "
            f"{layout.chunks_per_shard} (expected {(*layout.chunks_per_shard, 2)})"
        )
    if arr.dtype.kind not in "ui":
        raise TypeError(f"index must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and bool((arr < 0).any()):
        raise ValueError("index entries must be non-negative")
    return arr


def encode_index(index: npt.ArrayLike, layout: IndexLayout) -> bytes:
    """Encode an index of shape ``(*chunks_per_shard, 2)`` (or ``(n, 2)``) to bytes."""
    arr = _checked_index_array(index, layout)
    raw = np.ascontiguousarray(arr, dtype=layout.dtype).tobytes()
    if layout.checksum:
        raw += crc32c.crc32c(raw).to_bytes(_CHECKSUM_NBYTES, "little")
    return raw


def _first_position(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


#: Up to this many entries, :func:`_entries_valid` checks an index in Python: numpy's
#: fixed cost per operation makes :func:`_validate_entries` about 50 µs for any size
#: (the Python check is 16 µs for 16 entries, 40 for 128, as slow as numpy at ~250).
_SMALL_INDEX = 192


def _entries_valid(pairs: list[int], lo: int, hi: int) -> bool:
    """Whether every ``(offset, nbytes)`` pair of the flat list ``pairs`` is empty (both
    :data:`EMPTY`) or has ``lo <= offset`` and ``offset + nbytes <= hi``;
    :func:`_validate_entries` names a fault."""
    it = iter(pairs)
    for offset, nbytes in zip(it, it, strict=True):
        if offset == EMPTY:
            if nbytes != EMPTY:
                return False
        elif nbytes == EMPTY or offset < lo or offset + nbytes > hi:
            return False
    return True


def _validate_entries(
    index: IndexArray, layout: IndexLayout, shard_size: int | None, key: str | None
) -> None:
    if index.size <= 2 * _SMALL_INDEX:  # the usual case: all valid, said in Python
        lo, hi = (0, EMPTY) if shard_size is None else layout.data_region(shard_size)
        if hi <= EMPTY and _entries_valid(index.ravel().tolist(), lo, hi):
            return
    offsets, sizes = index[..., 0], index[..., 1]
    empty_off, empty_size = offsets == _EMPTY_U64, sizes == _EMPTY_U64
    half = empty_off ^ empty_size
    if half.any():
        pos = _first_position(half)
        raise CorruptShardError(f"index entry {pos} is half empty", key=key)
    present = ~empty_off
    # offset + nbytes must fit in uint64; EMPTY - offset cannot underflow for present entries.
    overflow = present & (sizes > (_EMPTY_U64 - np.where(present, offsets, 0)))
    if overflow.any():
        pos = _first_position(overflow)
        raise CorruptShardError(f"index entry {pos}: offset + nbytes overflows", key=key)
    if shard_size is None:
        return
    lo, hi = layout.data_region(shard_size)
    ends = offsets + np.where(present, sizes, 0)
    outside = present & ((offsets < np.uint64(lo)) | (ends > np.uint64(hi)))
    if outside.any():
        pos = _first_position(outside)
        off, size = int(offsets[pos]), int(sizes[pos])
        raise CorruptShardError(
            f"chunk {pos} at bytes [{off}, {off + size}) lies outside the data region "
            f"[{lo}, {hi}) of a {shard_size}-byte shard",
            key=key,
        )


def decode_index(
    buf: BytesLike, layout: IndexLayout, *, shard_size: int | None = None, key: str | None = None
) -> IndexArray:
    """Decode and validate index bytes into a writable uint64 array ``(*chunks_per_shard, 2)``.

    Raises ``CorruptShardError`` for a wrong length, half-empty entries, overflowing entries
    or (when ``shard_size`` is known) chunks outside the shard's data region, and
    ``ChecksumError`` for a crc32c mismatch. Only allocates in proportion to ``len(buf)``.
    """
    view = _as_view(buf)
    expected = layout.index_nbytes
    if view.nbytes != expected:
        raise CorruptShardError(f"index is {view.nbytes} bytes, expected {expected}", key=key)
    if shard_size is not None and shard_size < expected:
        raise CorruptShardError(
            f"shard is {shard_size} bytes, smaller than its {expected}-byte index", key=key
        )
    body = view[: _ENTRY_NBYTES * layout.n_chunks]
    if layout.checksum:
        stored = int.from_bytes(view[-_CHECKSUM_NBYTES:], "little")
        actual = crc32c.crc32c(body)
        if stored != actual:
            raise ChecksumError(
                f"index crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}", key=key
            )
    flat = np.frombuffer(body, dtype=layout.dtype)
    index = flat.astype(np.uint64).reshape((*layout.chunks_per_shard, 2))
    _validate_entries(index, layout, shard_size, key)
    return index


def decode_shard(
    buf: BytesLike, layout: IndexLayout, *, key: str | None = None
) -> dict[tuple[int, ...], memoryview]:
    """All present inner chunks of a whole shard, as zero-copy memoryview slices of ``buf``."""
    positions, views = shard_chunks(buf, layout, key=key)
    return dict(zip(map(tuple, positions.tolist()), views, strict=True))


def shard_chunks(
    buf: BytesLike, layout: IndexLayout, *, key: str | None = None
) -> tuple[npt.NDArray[np.intp], list[memoryview]]:
    """:func:`decode_shard` as arrays: the positions of the present inner chunks (rows, C
    order) and their bytes (zero-copy memoryview slices of ``buf``)."""
    view = _as_view(buf)
    size = view.nbytes
    rng = index_byte_range(layout, size, key=key)
    index = decode_index(view[rng.as_slice()], layout, shard_size=size, key=key)
    mask = present_mask(index)
    offsets: list[int] = index[..., 0][mask].tolist()
    sizes: list[int] = index[..., 1][mask].tolist()
    views = [view[off : off + n] for off, n in zip(offsets, sizes, strict=True)]
    return np.argwhere(mask), views


def inspect_shard(
    buf: BytesLike, layout: IndexLayout, *, chunk_checksum: bool = False, key: str | None = None
) -> ShardHealth[tuple[int, ...]]:
    """What a whole shard still holds (see :mod:`~asyncshard.formats.health`).

    An index that does not decode (wrong size, crc32c mismatch, half-empty or overflowing
    entries) is a fault that loses every chunk. Otherwise each chunk is lost alone when its
    bytes lie outside the data region, partly overlap another chunk's, or (with
    ``chunk_checksum``: the inner codecs end with ``crc32c``) fail their checksum.
    """
    view = _as_view(buf)
    size = view.nbytes
    health: ShardHealth[tuple[int, ...]] = ShardHealth()
    try:
        rng = index_byte_range(layout, size, key=key)
        index = decode_index(view[rng.as_slice()], layout, key=key)
    except FormatError as exc:
        health.faults.append(f"index: {exc}")
        return health
    lo, hi = layout.data_region(size)
    spans: list[tuple[int, int, tuple[int, ...]]] = []
    for pos, off, n in chunk_slices(index):
        if off < lo or off + n > hi:
            health.lost[pos] = (
                f"bytes [{off}, {off + n}) lie outside the data region [{lo}, {hi}) "
                f"of the {size}-byte shard"
            )
            continue
        stored = view[off : off + n]
        if chunk_checksum and not _checksum_holds(stored):
            health.lost[pos] = "chunk crc32c mismatch"
            continue
        spans.append((off, off + n, pos))
        health.intact[pos] = stored
    for pos, reason in overlapping(spans).items():
        del health.intact[pos]
        health.lost[pos] = reason
    return health


def _checksum_holds(stored: memoryview) -> bool:
    """Whether ``stored`` ends with the crc32c (little-endian) of the bytes before it."""
    if stored.nbytes < _CHECKSUM_NBYTES:
        return False
    body, tail = stored[:-_CHECKSUM_NBYTES], stored[-_CHECKSUM_NBYTES:]
    return crc32c.crc32c(body) == int.from_bytes(tail, "little")


def _checked_position(pos: object, cps: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(pos, tuple) or len(pos) != len(cps) or not all(_is_int(p) for p in pos):
        raise ValueError(f"chunk position {pos!r} is not a tuple of {len(cps)} ints")
    out = tuple(int(p) for p in pos)
    if not all(0 <= p < c for p, c in zip(out, cps, strict=True)):
        raise ValueError(f"chunk position {out} is outside chunks_per_shard {cps}")
    return out


def _linear_positions(positions: list[Any], cps: tuple[int, ...]) -> npt.NDArray[np.intp]:
    """The C-order linear index of each chunk position (validated, all at once)."""
    ndim = len(cps)
    if (  # C-level scans: a Python check per position costs more than the rest
        set(map(type, positions)) != {tuple}
        or set(map(len, positions)) != {ndim}
        or not set(map(type, itertools.chain.from_iterable(positions))) <= {int}
    ):  # not plain tuples of Python ints: check each (numpy ints are fine, bools are not)
        positions = [_checked_position(p, cps) for p in positions]
    if not ndim:
        return np.zeros(len(positions), dtype=np.intp)
    try:
        arr = np.array(positions, dtype=np.int64).reshape(len(positions), ndim)
    except OverflowError:  # a position beyond int64 is outside: the plain check names it
        for p in positions:
            _checked_position(p, cps)
        raise
    bad = ((arr < 0) | (arr >= np.array(cps, dtype=np.int64))).any(axis=1)
    if bad.any():
        _checked_position(positions[int(np.argmax(bad))], cps)  # raises with the position
    return np.asarray(np.ravel_multi_index(tuple(arr.T), cps), dtype=np.intp)


def encode_shard(
    chunks: Mapping[_Pos, BytesLike],
    layout: IndexLayout,
    *,
    order: Literal["morton", "C"] = "morton",
) -> bytes:
    """Build a shard from encoded inner chunks keyed by position within the shard.

    Missing positions are empty. Data is written back to back in ``order`` and the index
    placed per ``layout.location`` (offsets absolute in the object). An all-empty shard is
    not a thing to write: callers delete the object instead, so an empty mapping raises
    ``ValueError``.
    """
    if not chunks:
        raise ValueError("no chunks to encode: delete the shard instead of writing it empty")
    cps = layout.chunks_per_shard
    linear = _linear_positions(list(chunks), cps)
    ordered = np.sort(linear)
    if (ordered[1:] == ordered[:-1]).any():
        raise ValueError("duplicate chunk positions")
    if order == "morton":
        written = np.argsort(morton_rank(cps)[linear], kind="stable") if cps else linear
    elif order == "C":
        written = np.argsort(linear, kind="stable")
    else:
        raise ValueError(f"order must be 'morton' or 'C', got {order!r}")
    values = [v if type(v) is bytes else _as_view(v) for v in chunks.values()]
    parts = [values[i] for i in written.tolist()]
    sizes = np.fromiter(map(len, parts), dtype=np.uint64, count=len(parts))  # flat bytes
    start = layout.index_nbytes if layout.location == "start" else 0
    index = empty_index(layout).reshape(-1, 2)
    index[linear[written], 0] = np.cumsum(sizes) - sizes + np.uint64(start)
    index[linear[written], 1] = sizes
    index_bytes = encode_index(index.reshape(*cps, 2), layout)
    if layout.location == "start":
        return b"".join([memoryview(index_bytes), *parts])
    return b"".join([*parts, memoryview(index_bytes)])
