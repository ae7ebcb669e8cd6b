"""Planning a Zarr pass as the listing arrives, in memory that does not grow with it.

A listing gives objects in the store's order; a pass works target by target. Every
object is reduced to one ``uint64`` *code* that sorts in the order the pass needs,
and the codes go into :class:`~asyncshard.convert.spill.SortedSpill` (sorted runs on
disk): a flat chunk's code is its target shard's number (C order on the object grid)
times the chunks per shard, plus its position inside the shard, so sorted codes are
the chunks shard by shard, each shard's in chunk order. Tasks are then made from the
sorted stream one group at a time (:meth:`PassPlanner.tasks`): what is in memory is
one run of codes, one block per run and the tasks in flight.

The tasks are those of :func:`asyncshard.convert.plan.plan_pass` (which is this
planner fed from lists): one writer per target object, every stored chunk read once,
targets left by an interrupted run only read (``index``, or ``existing`` of an
``unpack``/``split``).

* **pack** (flat -> sharded): codes of the chunks under the target grid, grouped by
  shard; the targets found are shard numbers, merged in the same order.
* **unpack** (sharded -> flat): source shard numbers; the flat chunks found are coded
  under the source grid, so a shard's ``existing`` is its group.
* **copy** (same layout, other keys): object numbers; flat objects go 256 a task.
* **reshard**: a source shard whose every target lies inside it is ``split`` (read
  once, cut into its targets); the other targets are ``repack``-ed from all the
  source shards over them, grouped by target through a spill of ``(target, source)``
  pairs.

A grid whose cells do not fit ``uint64`` codes (more than 2^63) is refused with a
:class:`~asyncshard.errors.ConversionError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from asyncshard.convert.layout import ArrayLayout
from asyncshard.convert.runner import Task, TaskKind
from asyncshard.convert.spill import Codes, Cursor, SortedSpill, groups, with_done
from asyncshard.errors import ConversionError
from asyncshard.formats.zarr3.keys import Coords

__all__ = ["COPY_GROUP", "PassPlanner", "plan_from"]

#: Unsharded objects copied by one task (their keys change, nothing else).
COPY_GROUP = 256
_LIMIT = 1 << 63
_BATCH = 4096

Kind = Literal["pack", "unpack", "copy", "copy-flat", "reshard"]
Rows = npt.NDArray[np.int64]
Lazy = Callable[[], tuple[Coords, ...]]
#: A task before its coordinates are made: kind, target, sources, existing.
Planned = tuple[TaskKind, Coords | None, Lazy, Lazy]


class _Grid:
    """C-order numbering of the cells of a grid (``shape``), vectorized."""

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.size = math.prod(self.shape)
        if self.size >= _LIMIT:
            raise ConversionError(
                f"a grid of {'x'.join(map(str, self.shape))} cells is too large to plan "
                "(more than 2^63)"
            )
        strides = [math.prod(self.shape[i + 1 :]) for i in range(len(self.shape))]
        self.strides = np.array(strides, dtype=np.uint64)

    def number(self, rows: Rows) -> Codes:
        """The cell numbers of ``rows`` (each inside the grid)."""
        if not self.shape:
            return np.zeros(len(rows), dtype=np.uint64)
        numbers: Codes = (rows.astype(np.uint64) * self.strides).sum(axis=1, dtype=np.uint64)
        return numbers

    def cells(self, numbers: Codes) -> Rows:
        """The rows of cell ``numbers``."""
        out = np.empty((numbers.size, len(self.shape)), dtype=np.int64)
        rest = numbers.astype(np.uint64)
        for axis, stride in enumerate(self.strides.tolist()):
            out[:, axis] = (rest // np.uint64(stride)).astype(np.int64)
            rest = rest % np.uint64(stride)
        return out


def _tuples(rows: Rows) -> tuple[Coords, ...]:
    return tuple(map(tuple, rows.tolist()))


def _inside(objects: Sequence[Coords], grid: Sequence[int]) -> tuple[Rows, int]:
    """Rows of the ``objects`` inside ``grid`` and how many were not."""
    ndim = len(grid)
    if not objects:
        return np.empty((0, ndim), dtype=np.int64), 0
    try:
        rows = np.array(objects, dtype=np.int64).reshape(len(objects), ndim)
    except OverflowError:  # a stray key with a coordinate beyond int64: outside anyway
        fits = [o for o in objects if all(-_LIMIT <= c < _LIMIT for c in o)]
        rows, _ = _inside(fits, grid)
        return rows, len(objects) - len(rows)
    mask = np.all((rows >= 0) & (rows < np.array(grid, dtype=np.int64)), axis=1)
    return rows[mask], int(len(rows) - mask.sum())


class PassPlanner:
    """The tasks of one Zarr pass from the objects found, in bounded memory.

    Args:
        src: the layout the pass reads.
        dst: the layout it writes.
        folder: where sorted runs go (default: a temporary folder).
    """

    def __init__(self, src: ArrayLayout, dst: ArrayLayout, folder: str | None = None) -> None:
        if src.chunk_shape != dst.chunk_shape or src.shape != dst.shape:
            raise ValueError("source and target layouts differ in shape or chunk shape")
        self.src, self.dst = src, dst
        self.kind: Kind
        if src.sharded == dst.sharded and src.cps == dst.cps and src.index == dst.index:
            self.kind = "copy" if src.sharded else "copy-flat"
        elif not src.sharded:
            self.kind = "pack"
        elif not dst.sharded:
            self.kind = "unpack"
        else:
            self.kind = "reshard"
        self.src_objects = _Grid(src.object_grid)
        self.dst_objects = _Grid(dst.object_grid)
        self.cps = _Grid(dst.cps if self.kind == "pack" else src.cps)
        self._folder = folder
        self._sources = SortedSpill(folder)
        self._done = SortedSpill(folder)
        #: Source objects outside the array (ignored), and found all in all.
        self.ignored = 0
        self.found = 0
        self._pending: list[Coords] = []
        self._pending_done: list[Coords] = []
        self._count = 0

    # -- collecting -------------------------------------------------------------------

    def add_source(self, obj: Coords) -> None:
        """A source object found by the listing (repeats and strays allowed)."""
        self._pending.append(obj)
        if len(self._pending) >= _BATCH:
            self._flush()

    def add_done(self, obj: Coords) -> None:
        """A target object found (written by an interrupted run of this pass)."""
        self.found += 1
        self._pending_done.append(obj)
        if len(self._pending_done) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        rows, outside = _inside(self._pending, self.src.object_grid)
        self._pending.clear()
        self.ignored += outside
        if self.kind == "pack":
            self._sources.add(self._code(rows, self.dst))
        else:
            self._sources.add(self.src_objects.number(rows))
        if self.kind == "unpack":  # flat chunks found, coded under the source shards
            done, _ = _inside(self._pending_done, self.src.chunk_grid)
            self._done.add(self._code(done, self.src))
        else:
            done, _ = _inside(self._pending_done, self.dst.object_grid)
            self._done.add(self.dst_objects.number(done))
        self._pending_done.clear()

    def _code(self, chunks: Rows, layout: ArrayLayout) -> Codes:
        """Chunk codes: shard number (object grid of ``layout``) x chunks per shard +
        position in the shard."""
        cps = np.array(layout.cps, dtype=np.int64)
        objects = _Grid(layout.object_grid)
        if objects.size * self.cps.size >= _LIMIT:
            raise ConversionError("the chunk grid is too large to plan (more than 2^63 cells)")
        shard = objects.number(chunks // cps) if len(cps) else np.zeros(len(chunks), np.uint64)
        position = self.cps.number(chunks % cps) if len(cps) else shard
        return shard * np.uint64(self.cps.size) + position

    def _chunks(self, codes: Codes, layout: ArrayLayout) -> Rows:
        """The chunk rows of codes made by :meth:`_code`."""
        size = np.uint64(self.cps.size)
        shards = _Grid(layout.object_grid).cells(codes // size)
        return shards * np.array(layout.cps, dtype=np.int64) + self.cps.cells(codes % size)

    # -- planning -----------------------------------------------------------------------

    @property
    def sources(self) -> int:
        """Distinct source objects inside the array (once :meth:`tasks` has run)."""
        return self._count

    def count(self) -> int:
        """The number of tasks :meth:`tasks` gives (no task is made)."""
        return sum(1 for _ in self._plan())

    def tasks(self) -> Iterator[Task[Coords]]:
        """The tasks, made as they are taken."""
        for kind, target, sources, existing in self._plan():
            yield Task(kind, target, sources(), existing())

    def _plan(self) -> Iterator[Planned]:
        self._flush()
        self._count = 0
        plans = {
            "pack": self._pack,
            "unpack": self._unpack,
            "copy": self._copy,
            "copy-flat": self._copy_flat,
            "reshard": self._reshard,
        }
        return plans[self.kind]()

    def _pack(self) -> Iterator[Planned]:
        done = Cursor(self._done.blocks())
        for shard, codes in groups(self._sources.blocks(), self.cps.size):
            self._count += codes.size
            target = self._object(self.dst_objects, shard)
            if done.has(shard):
                yield "index", target, _none, _none
            else:
                yield "pack", target, self._chunk_tuples(codes, self.dst), _none

    def _unpack(self) -> Iterator[Planned]:
        for number, done in with_done(self._sources.blocks(), self._done.blocks(), self.cps.size):
            self._count += 1
            existing = _none if done is None else self._chunk_tuples(done, self.src)
            shard = self._object(self.src_objects, number)
            yield "unpack", None, _const((shard,)), existing

    def _copy(self) -> Iterator[Planned]:
        done = Cursor(self._done.blocks())
        for block in self._sources.blocks():
            self._count += block.size
            for number, found in zip(block.tolist(), done.members(block).tolist(), strict=True):
                obj = self._object(self.src_objects, number)
                if found:
                    yield "index", obj, _none, _none
                else:
                    yield "copy", obj, _const((obj,)), _none

    def _copy_flat(self) -> Iterator[Planned]:
        done = Cursor(self._done.blocks())
        todo: list[Codes] = []
        held = 0
        for block in self._sources.blocks():
            self._count += block.size
            mask = done.members(block)
            for number in block[mask].tolist():
                yield "index", self._object(self.src_objects, number), _none, _none
            todo.append(block[~mask])
            held += int((~mask).sum())
            while held >= COPY_GROUP:
                codes = np.concatenate(todo)
                todo, held = [codes[COPY_GROUP:]], codes.size - COPY_GROUP
                yield "copy", None, self._object_tuples(codes[:COPY_GROUP]), _none
        if held:
            yield "copy", None, self._object_tuples(np.concatenate(todo)), _none

    def _reshard(self) -> Iterator[Planned]:
        """Splits of the source shards whose targets all lie inside them; repacks of the
        other targets from every source shard over them. Pairs ``(target, source,
        splittable)`` are sorted by target (to merge with the targets found), then the
        targets of splittable sources, with a found mark, by source."""
        src, dst = self.src, self.dst
        nsrc, ndst = self.src_objects.size, self.dst_objects.size
        if 2 * nsrc * ndst >= _LIMIT:
            raise ConversionError("the shard grids are too large to plan (more than 2^63 pairs)")
        pairs, splits = SortedSpill(self._folder), SortedSpill(self._folder)
        try:
            for block in self._sources.blocks():
                self._count += block.size
                for number, shard in zip(
                    block.tolist(), self.src_objects.cells(block).tolist(), strict=True
                ):
                    lo, hi = src.grid.chunk_range(shard)
                    targets = dst.grid.objects_over(lo, hi)
                    whole = len(targets) > 1 and all(
                        _within(dst.grid.chunk_range(t), lo, hi) for t in targets
                    )
                    rows = np.array(targets, dtype=np.int64).reshape(len(targets), src.ndim)
                    codes = self.dst_objects.number(rows) * np.uint64(nsrc) + np.uint64(number)
                    pairs.add(codes * np.uint64(2) + np.uint64(whole))
            done = Cursor(self._done.blocks())
            for target, codes in groups(pairs.blocks(), 2 * nsrc):
                found = done.has(target)
                if codes.size == 1 and int(codes[0]) & 1:  # inside its one splittable source
                    source = (int(codes[0]) >> 1) % nsrc
                    splits.add(np.array([(source * ndst + target) * 2 + found], np.uint64))
                elif found:
                    yield "index", self._object(self.dst_objects, target), _none, _none
                else:
                    feeders = (codes >> np.uint64(1)) % np.uint64(nsrc)
                    target_obj = self._object(self.dst_objects, target)
                    yield "repack", target_obj, self._object_tuples(feeders), _none
            for source, codes in groups(splits.blocks(), 2 * ndst):
                numbers = (codes >> np.uint64(1)) % np.uint64(ndst)
                marks = (codes & np.uint64(1)).astype(bool)
                existing = _tuples(self.dst_objects.cells(numbers[marks]))
                if len(existing) < codes.size:
                    shard = self._object(self.src_objects, source)
                    yield "split", None, _const((shard,)), _const(existing)
                for target_obj in existing:
                    yield "index", target_obj, _none, _none
        finally:
            pairs.close()
            splits.close()

    # -- coordinates ------------------------------------------------------------------

    @staticmethod
    def _object(grid: _Grid, number: int) -> Coords:
        row: list[int] = grid.cells(np.array([number], dtype=np.uint64))[0].tolist()
        return tuple(row)

    def _object_tuples(self, numbers: Codes) -> Lazy:
        numbers = numbers.copy()
        return lambda: _tuples(self.src_objects.cells(numbers))

    def _chunk_tuples(self, codes: Codes, layout: ArrayLayout) -> Lazy:
        codes = codes.copy()
        return lambda: _tuples(self._chunks(codes, layout))

    def close(self) -> None:
        """Remove the spilled runs."""
        self._sources.close()
        self._done.close()

    def __enter__(self) -> PassPlanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _within(box: tuple[Coords, Coords], lo: Coords, hi: Coords) -> bool:
    """Whether the chunk box ``box`` lies inside ``[lo, hi)``."""
    a, b = box
    return all(x >= y for x, y in zip(a, lo, strict=True)) and all(
        x <= y for x, y in zip(b, hi, strict=True)
    )


def _none() -> tuple[Coords, ...]:
    return ()


def _const(value: tuple[Coords, ...]) -> Lazy:
    return lambda: value


def plan_from(
    src: ArrayLayout, dst: ArrayLayout, objects: Iterable[Coords], done: Iterable[Coords] = ()
) -> tuple[list[Task[Coords]], int]:
    """All tasks of a pass from objects in memory, and the objects ignored."""
    with PassPlanner(src, dst) as planner:
        for obj in objects:
            planner.add_source(obj)
        for obj in done:
            planner.add_done(obj)
        tasks = list(planner.tasks())
        return tasks, planner.ignored
