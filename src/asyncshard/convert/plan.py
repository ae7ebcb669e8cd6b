"""Pure planning of Zarr conversions: the target layout, the passes, the per-object tasks.

* :func:`resolve_target` turns a request (chunks per shard or flat, optional separator
  and index options) and an array document into the final document, or ``None`` when
  the array is already in the requested layout.
* :func:`plan_passes` splits the way from the current to the final document into passes
  whose source and target keys are disjoint (one pass, or two when the final keys use
  the same encoding as the current ones).
* :func:`plan_pass` lists the tasks of one pass from the objects found by listing: one
  task per target object (pack, repack, copy) or per source shard (unpack, and split:
  the targets a source shard alone feeds), so that every target object has exactly one
  writer.

Nothing here does I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from asyncshard.convert.autoshape import DEFAULT_SHARD_BYTES, auto_for_document
from asyncshard.convert.layout import (
    ArrayLayout,
    IndexLocation,
    disjoint,
    encoding_json,
    partner,
    read_layout,
    retarget,
)
from asyncshard.convert.runner import Task, TaskKind
from asyncshard.convert.streamplan import plan_from
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding, Coords, Separator

__all__ = [
    "Request",
    "Task",
    "TaskKind",
    "normalize_shard_shape",
    "plan_pass",
    "plan_passes",
    "resolve_target",
]


def normalize_shard_shape(shard_shape: int | Sequence[int] | None, ndim: int) -> Coords | None:
    """Chunks per shard for an ``ndim``-d array: an int means every axis."""
    if shard_shape is None:
        return None
    if isinstance(shard_shape, int):
        values: tuple[int, ...] = (shard_shape,) * ndim
    else:
        values = tuple(operator.index(n) for n in shard_shape)
        if len(values) != ndim:
            raise ValueError(
                f"shard shape {list(values)} has {len(values)} dimensions, the array {ndim}"
            )
    if any(n < 1 for n in values):
        raise ValueError(f"shard shape {list(values)} must be positive (in inner chunks)")
    return values


@dataclass(frozen=True)
class Request:
    """What the caller asked for.

    ``shard_shape``: chunks per shard (an int for every axis), ``"auto"`` (chosen per
    array for shards of ``shard_bytes`` decoded bytes, :mod:`.autoshape`) or ``None``
    for flat.
    ``separator``: the key separator of the result (``None``: the current one; a
    conversion to the current keys takes two passes, see :func:`plan_passes`).
    ``index_location``/``checksum``: ``None`` keeps the current ones (a flat array gets
    ``end`` with crc32c).
    """

    shard_shape: int | tuple[int, ...] | Literal["auto"] | None
    separator: Separator | None = None
    index_location: IndexLocation | None = None
    checksum: bool | None = None
    shard_bytes: int = DEFAULT_SHARD_BYTES

    def __post_init__(self) -> None:
        if self.separator not in (None, "/", "."):
            raise ValueError(f"separator must be '/' or '.', got {self.separator!r}")
        if self.index_location not in (None, "start", "end"):
            raise ValueError(
                f"index_location must be 'start' or 'end', got {self.index_location!r}"
            )
        if isinstance(self.shard_shape, int):
            normalize_shard_shape(self.shard_shape, 1)
        if isinstance(self.shard_shape, str) and self.shard_shape != "auto":
            raise ValueError(
                f"shard_shape must be chunks per shard or 'auto', got {self.shard_shape!r}"
            )
        if self.shard_bytes <= 0:
            raise ValueError("shard_bytes must be positive")


def resolve_target(
    doc: Mapping[str, Any], request: Request, keys: ChunkKeyEncoding | None = None
) -> dict[str, Any] | None:
    """The final document for ``request``, or ``None`` if ``doc`` already satisfies it.

    "Already satisfies" compares the layout (flat, or chunks per shard and index
    options), not the key separator. Without a separator in ``request`` the result has
    ``keys``, by default ``doc``'s own.
    """
    cur = read_layout(doc)
    if request.shard_shape == "auto":
        cps: Coords | None = auto_for_document(doc, cur.chunk_shape, request.shard_bytes)
    else:
        cps = normalize_shard_shape(request.shard_shape, cur.ndim)
    index_location: IndexLocation = request.index_location or (
        cur.index.location if cur.index else "end"
    )
    checksum = (
        request.checksum
        if request.checksum is not None
        else (cur.index.checksum if cur.index else True)
    )
    if cps is None:
        if not cur.sharded:
            return None
    elif cur.sharded and cur.chunks_per_shard == cps and cur.index is not None:
        same_index = (cur.index.location, cur.index.checksum) == (index_location, checksum)
        if same_index and cur.index.endian == "little":
            return None
    encoding = keys or cur.encoding  # plan_passes stages it when it collides with doc's
    if request.separator is not None:
        encoding = ChunkKeyEncoding(encoding.kind, request.separator)
    return retarget(doc, cps, encoding, index_location=index_location, checksum=checksum)


def plan_passes(
    doc: Mapping[str, Any], final: Mapping[str, Any]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``[(source, target), ...]`` documents of the passes from ``doc`` to ``final``.

    Each pass writes keys disjoint from the keys it reads. When ``final`` uses keys that
    could equal the current ones, the first pass goes to the final layout under the
    partner encoding and the second renames its objects (verbatim copies).
    """
    cur, end = read_layout(doc), read_layout(final)
    if disjoint(end.encoding, cur.encoding, cur.ndim):
        return [(dict(doc), dict(final))]
    middle = dict(final)
    middle["chunk_key_encoding"] = encoding_json(partner(cur.encoding, cur.ndim))
    return [(dict(doc), middle), (middle, dict(final))]


def plan_pass(
    src: ArrayLayout,
    dst: ArrayLayout,
    src_objects: Iterable[Coords],
    dst_objects: Iterable[Coords] = (),
) -> tuple[list[Task[Coords]], int]:
    """Tasks of one pass and the number of source objects ignored (outside the array).

    ``src_objects``: coords of the source objects found (object grid of ``src``);
    ``dst_objects``: target objects already written by an interrupted run of the same
    pass (trusted: writes are atomic and the source is unchanged). The tasks of
    :class:`~asyncshard.convert.streamplan.PassPlanner`, which conversions use to plan
    as the listing arrives, in bounded memory.
    """
    return plan_from(src, dst, src_objects, dst_objects)
