"""Shard shapes chosen from a target shard size (``SHAPE auto``). Pure.

A shard of :data:`DEFAULT_SHARD_BYTES` (64 MiB of decoded data; 16-32 MiB stored at the
usual 2-4x compression) balances what object stores and their users pay for:

* **request rate and object count**: a 32^3 uint8 chunk is 32 KiB, so a flat array of
  a terabyte is 32 million objects; at 64 MiB it is 16,000 shards of 2,048 chunks, whose
  index (32 KiB) is one cheap request, cached after the first read;
* **viewer access**: viewers read single chunks by byte range, so the shard size does
  not change what a view costs, only how many index reads a cold view makes;
* **write granularity**: a partial update rewrites its whole shard, so shards much larger
  than this make small writes expensive (and a lost update costs more to redo).

Shards grow by doubling the chunks per shard along the axis whose shard extent (in array
elements) is smallest, so shards stay as isotropic as the chunks allow; an axis stops
growing once one shard spans its whole chunk grid, so a small pyramid level gets one
shard. Axes named like time or channels (``t``, ``c``: OME-Zarr's) keep one chunk per
shard: a viewer reads one time point or channel at a time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "NON_SPATIAL_AXES",
    "auto_chunks_per_shard",
    "auto_for_document",
    "itemsize_of",
]

DEFAULT_SHARD_BYTES = 64 * 2**20
#: Dimension names that keep one chunk per shard.
NON_SPATIAL_AXES = frozenset({"t", "time", "c", "channel", "channels"})
_NUMERIC = re.compile(r"(?:u?int|float|complex|r)(\d+)")


def itemsize_of(data_type: object) -> int:
    """Bytes per element of a Zarr v3 ``data_type`` (1 for types of no fixed size)."""
    name = data_type if isinstance(data_type, str) else ""
    match = _NUMERIC.fullmatch(name)
    return max(1, int(match.group(1)) // 8) if match else 1


def auto_chunks_per_shard(
    shape: Sequence[int],
    chunk_shape: Sequence[int],
    itemsize: int,
    target_bytes: int = DEFAULT_SHARD_BYTES,
    fixed_axes: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """Chunks per shard along each axis for shards of at most ``target_bytes`` decoded
    bytes (at least one chunk); see the module docstring."""
    if target_bytes <= 0:
        raise ValueError("the target shard size must be positive")
    grid = [max(1, -(-s // c)) for s, c in zip(shape, chunk_shape, strict=True)]
    cps = [1] * len(grid)
    chunk_bytes = math.prod(chunk_shape) * itemsize
    while True:
        growing = [a for a in range(len(grid)) if a not in fixed_axes and cps[a] < grid[a]]
        if not growing or chunk_bytes * math.prod(cps) * 2 > target_bytes:
            return tuple(cps)
        axis = min(growing, key=lambda a: (cps[a] * chunk_shape[a], -a))
        cps[axis] *= 2


def auto_for_document(
    doc: Mapping[str, Any], chunk_shape: Sequence[int], target_bytes: int
) -> tuple[int, ...]:
    """:func:`auto_chunks_per_shard` for a ``zarr.json`` (its shape, data type and
    dimension names) whose (inner) chunks are ``chunk_shape``."""
    names = doc.get("dimension_names") or []
    fixed = frozenset(
        i for i, n in enumerate(names) if isinstance(n, str) and n.lower() in NON_SPATIAL_AXES
    )
    shape = [int(s) for s in doc.get("shape", ())]
    return auto_chunks_per_shard(
        shape, chunk_shape, itemsize_of(doc.get("data_type")), target_bytes, fixed
    )
