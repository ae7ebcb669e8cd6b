"""Compressed Morton (Z-order) codes of N-d grid positions: the one implementation.

A grid of shape ``s`` gives dimension ``d`` ``bits[d] = bit_length(s[d] - 1)`` bits. The
code takes, for bit ``i`` from 0 up and for each dimension ``d`` in order while
``i < bits[d]``, bit ``i`` of coordinate ``d``. Dimension 0 therefore holds the lowest
bit. Both formats use it: Zarr shards are written in this order of their inner-chunk
positions (what zarr-python writes), and precomputed chunk ids are the codes of
``(x, y, z)`` grid positions.

Pure functions: scalar helpers on Python ints (fast for one position), vectorised ones on
numpy arrays. ``ValueError`` for positions outside the grid and grids needing more than
64 bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

__all__ = [
    "decode_morton",
    "decode_morton_codes",
    "morton_bits",
    "morton_code",
    "morton_code_inside",
    "morton_codes",
    "morton_order",
    "morton_rank",
]

U64Array = npt.NDArray[np.uint64]
Plan = tuple[tuple[int, int], ...]


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(s) for s in shape)
    if any(s < 1 for s in out):
        raise ValueError(f"grid shape {out} must be positive")
    return out


def morton_bits(shape: Sequence[int]) -> tuple[int, ...]:
    """Bits per dimension: ``bit_length(shape[d] - 1)``."""
    return tuple((s - 1).bit_length() for s in _shape(shape))


@lru_cache(maxsize=256)
def _plan(shape: tuple[int, ...]) -> Plan:
    """``(dimension, coordinate bit)`` of each code bit, lowest first."""
    bits = morton_bits(shape)
    if sum(bits) > 64:
        raise ValueError(f"grid shape {shape} needs {sum(bits)} bits: more than 64")
    ndim = len(bits)
    return tuple((d, i) for i in range(max(bits, default=0)) for d in range(ndim) if i < bits[d])


def _check_inside(pos: Sequence[int], shape: tuple[int, ...]) -> None:
    if len(pos) != len(shape) or not all(0 <= p < s for p, s in zip(pos, shape, strict=True)):
        raise ValueError(f"grid position {tuple(pos)} is outside the grid {shape}")


@lru_cache(maxsize=256)
def _byte_tables(shape: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per dimension, per byte of a coordinate: the code bits each byte value gives (so
    a code is a few table lookups instead of a loop over every bit)."""
    where = {bit: j for j, bit in enumerate(_plan(shape))}  # (dimension, bit) -> code bit
    return tuple(
        tuple(
            tuple(
                sum(
                    1 << where[d, 8 * k + b]
                    for b in range(8)
                    if v >> b & 1 and (d, 8 * k + b) in where
                )
                for v in range(256)
            )
            for k in range(-(-bits // 8))
        )
        for d, bits in enumerate(morton_bits(shape))
    )


def morton_code(pos: Sequence[int], shape: Sequence[int]) -> int:
    """The code of one grid position (Python ints; no numpy on this path)."""
    grid = _shape(shape)
    _check_inside(pos, grid)
    return morton_code_inside(pos, grid)


def morton_code_inside(pos: Sequence[int], shape: Sequence[int]) -> int:
    """:func:`morton_code` of a position the caller checked lies inside ``shape``."""
    code = 0
    for p, tables in zip(pos, _byte_tables(tuple(shape)), strict=True):
        for table in tables:
            code |= table[p & 255]
            p >>= 8
    return code


def decode_morton(code: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The grid position of one code; ``ValueError`` if it is no code of the grid."""
    grid = _shape(shape)
    plan = _plan(grid)
    if code < 0 or code >> len(plan):
        raise ValueError(f"{code} exceeds the {len(plan)}-bit Morton code of grid {grid}")
    pos = [0] * len(grid)
    for j, (d, i) in enumerate(plan):
        pos[d] |= ((code >> j) & 1) << i
    _check_inside(pos, grid)
    return tuple(pos)


def morton_codes(positions: npt.ArrayLike, shape: Sequence[int]) -> U64Array:
    """Codes of an array of positions of shape ``(..., ndim)``; returns shape ``(...)``."""
    grid = _shape(shape)
    pos = np.asarray(positions)
    if pos.ndim == 0 or pos.shape[-1] != len(grid) or (pos.size and pos.dtype.kind not in "iu"):
        raise ValueError(
            f"grid positions must be integers of shape (..., {len(grid)}), got {pos.shape}"
        )
    limit = np.array(grid, dtype=np.int64)
    if pos.size and (bool((pos < 0).any()) or bool((pos >= limit).any())):
        raise ValueError(f"grid position outside the grid {grid}")
    upos = pos.astype(np.uint64)
    code = np.zeros(pos.shape[:-1], dtype=np.uint64)
    for j, (d, i) in enumerate(_plan(grid)):
        code |= ((upos[..., d] >> np.uint64(i)) & np.uint64(1)) << np.uint64(j)
    return code


def decode_morton_codes(codes: npt.ArrayLike, shape: Sequence[int]) -> U64Array:
    """Positions ``(..., ndim)`` of an array of uint64 codes; ``ValueError`` for non-codes."""
    grid = _shape(shape)
    plan = _plan(grid)
    arr = np.asarray(codes, dtype=np.uint64)
    if len(plan) < 64 and arr.size and int(np.max(arr)) >> len(plan):
        raise ValueError(f"code exceeds the {len(plan)}-bit Morton code of grid {grid}")
    pos = np.zeros((*arr.shape, len(grid)), dtype=np.uint64)
    for j, (d, i) in enumerate(plan):
        pos[..., d] |= ((arr >> np.uint64(j)) & np.uint64(1)) << np.uint64(i)
    if pos.size and bool((pos >= np.array(grid, dtype=np.uint64)).any()):
        raise ValueError(f"code decodes outside the grid {grid}")
    return pos


@lru_cache(maxsize=64)
def _order(shape: tuple[int, ...]) -> npt.NDArray[np.intp]:
    ndim = len(shape)
    n = int(np.prod(shape)) if ndim else 1
    if ndim == 0:
        out = np.zeros((1, 0), dtype=np.intp)
    else:
        positions = np.indices(shape).reshape(ndim, -1).T
        out = positions[np.argsort(morton_codes(positions, shape), kind="stable")]
    assert len(out) == n
    out.flags.writeable = False
    return out


def morton_order(shape: Sequence[int]) -> npt.NDArray[np.intp]:
    """Every position ``(n, ndim)`` of a grid in Z-order; cached and read-only."""
    return _order(tuple(int(s) for s in shape))


@lru_cache(maxsize=64)
def _rank(shape: tuple[int, ...]) -> npt.NDArray[np.intp]:
    order = _order(shape)
    linear = np.ravel_multi_index(tuple(order.T), shape) if shape else np.zeros(1, np.intp)
    rank = np.empty(len(order), dtype=np.intp)
    rank[linear] = np.arange(len(order), dtype=np.intp)
    rank.flags.writeable = False
    return rank


def morton_rank(shape: Sequence[int]) -> npt.NDArray[np.intp]:
    """For each C-order linear position of a grid, its rank in Z-order; cached, read-only."""
    return _rank(tuple(int(s) for s in shape))
