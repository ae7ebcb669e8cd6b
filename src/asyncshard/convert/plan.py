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

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

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
from asyncshard.formats.zarr3.grid import ChunkGrid
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

#: Unsharded objects copied by one task (their keys change, nothing else).
COPY_GROUP = 256


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


def _boxes(lo: Sequence[int], hi: Sequence[int]) -> Iterable[Coords]:
    return itertools.product(*(range(a, b) for a, b in zip(lo, hi, strict=True)))


def plan_pass(
    src: ArrayLayout,
    dst: ArrayLayout,
    src_objects: Iterable[Coords],
    dst_objects: Iterable[Coords] = (),
) -> tuple[list[Task[Coords]], int]:
    """Tasks of one pass and the number of source objects ignored (outside the array).

    ``src_objects``: coords of the source objects found (object grid of ``src``);
    ``dst_objects``: target objects already written by an interrupted run of the same
    pass (trusted: writes are atomic and the source is unchanged).
    """
    if src.chunk_shape != dst.chunk_shape or src.shape != dst.shape:
        raise ValueError("source and target layouts differ in shape or chunk shape")
    found = sorted(set(src_objects))
    inside = _in_bounds(found, src.object_grid)
    ignored = len(found) - len(inside)
    done = set(dst_objects)
    if src.sharded == dst.sharded and src.cps == dst.cps and src.index == dst.index:
        if src.sharded:  # one shard per task: shards can be large
            return [_copy_or_index(o, done) for o in inside], ignored
        todo = [o for o in inside if o not in done]  # small objects: a group per task
        copies = [
            Task[Coords]("copy", None, tuple(todo[i : i + COPY_GROUP]))
            for i in range(0, len(todo), COPY_GROUP)
        ]
        return copies + [Task("index", o, ()) for o in inside if o in done], ignored
    if not src.sharded:  # flat -> sharded
        groups = _group(inside, dst.grid)
        return [_target_task("pack", t, c, done) for t, c in groups], ignored
    if not dst.sharded:  # sharded -> flat
        tasks: list[Task[Coords]] = []
        for shard in inside:
            lo, hi = src.grid.chunk_range(shard)
            existing = tuple(c for c in _boxes(lo, hi) if c in done) if done else ()
            tasks.append(Task("unpack", None, (shard,), existing))
        return tasks, ignored
    return _reshard_tasks(src, dst, inside, done), ignored


def _reshard_tasks(
    src: ArrayLayout, dst: ArrayLayout, shards: list[Coords], done: set[Coords]
) -> list[Task[Coords]]:
    """Sharded -> sharded with another shard shape: a ``split`` task per source shard
    that alone feeds two or more targets (read once, whole), a ``repack`` task per
    target fed by several source shards (or the only one of its source)."""
    feeds: dict[Coords, list[Coords]] = {}
    boxes: list[tuple[Coords, list[Coords]]] = []
    for shard in shards:
        targets = dst.grid.objects_over(*src.grid.chunk_range(shard))
        boxes.append((shard, targets))
        for target in targets:
            feeds.setdefault(target, []).append(shard)
    tasks: list[Task[Coords]] = []
    for shard, targets in boxes:
        if len(targets) < 2 or any(len(feeds[t]) > 1 for t in targets):
            continue
        for target in targets:
            del feeds[target]
        existing = tuple(t for t in targets if t in done)
        if len(existing) < len(targets):
            tasks.append(Task("split", None, (shard,), existing))
        tasks.extend(Task("index", t, ()) for t in existing)
    tasks.extend(_target_task("repack", t, tuple(s), done) for t, s in sorted(feeds.items()))
    return tasks


def _in_bounds(objects: list[Coords], grid: Coords) -> list[Coords]:
    """The ``objects`` (sorted, distinct, each ``len(grid)`` non-negative ints) inside
    ``grid``; checked all at once (a flat array can have millions)."""

    def inside_one(obj: Coords) -> bool:
        return all(0 <= c < g for c, g in zip(obj, grid, strict=True))

    if not objects or not grid:
        return [o for o in objects if inside_one(o)]
    try:
        arr = np.array(objects, dtype=np.int64)
    except OverflowError:  # a stray key with a coordinate beyond int64: outside anyway
        return [o for o in objects if inside_one(o)]
    ok = (arr >= 0) & (arr < np.array(grid, dtype=np.int64))
    mask: npt.NDArray[np.bool_] = np.all(ok, axis=1)
    inside: list[bool] = mask.tolist()
    return objects if all(inside) else list(itertools.compress(objects, inside))


def _group(chunks: list[Coords], grid: ChunkGrid) -> list[tuple[Coords, tuple[Coords, ...]]]:
    """``(object, its chunks)`` for the sorted ``chunks`` grouped into the objects of
    ``grid``, in object order (chunks keep their order in a group)."""
    rows = np.array(chunks, dtype=np.int64).reshape(len(chunks), grid.ndim)
    return [(obj, tuple(chunks[i] for i in picks)) for obj, picks in grid.group_by_object(rows)]


def _target_task(
    kind: TaskKind, target: Coords, sources: tuple[Coords, ...], done: set[Coords]
) -> Task[Coords]:
    return Task("index", target, ()) if target in done else Task(kind, target, sources)


def _copy_or_index(obj: Coords, done: set[Coords]) -> Task[Coords]:
    return Task("index", obj, ()) if obj in done else Task("copy", obj, (obj,))
