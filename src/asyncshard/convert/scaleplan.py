"""Planning a precomputed pass as the listing arrives, in memory that does not grow.

As :mod:`asyncshard.convert.streamplan` does for Zarr: every file found becomes one
``uint64`` code that sorts in the order the pass works, spilled to disk
(:class:`~asyncshard.convert.spill.SortedSpill`). A chunk's code is its shard number
(the sharding spec's hash of its id) shifted above its compressed Morton id, so the
sorted codes are the chunks shard by shard; file names are made again from the ids
(``parse_chunk_name`` accepts exact chunk names only, so a name made from its id is
the name listed). Where shard number and id do not fit 63 bits together, the names are
planned in memory (:func:`plan_scale`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

import numpy as np

from asyncshard.convert.runner import Task, TaskKind
from asyncshard.convert.spill import Codes, Cursor, SortedSpill, groups, with_done
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale

__all__ = ["ScalePlan", "plan_scale"]

_BATCH = 4096
Names = Callable[[], tuple[str, ...]]


def _shards_of(scale: Scale, spec: ShardingSpec, names: Sequence[str]) -> list[int]:
    """Shard number (under ``spec``) of each unsharded chunk name of ``scale``."""
    if not names:
        return []
    positions = np.array([scale.parse_chunk_name(n) for n in names], dtype=np.int64)
    shards, _ = spec.shard_and_minishard(scale.chunk_ids(positions))
    return [int(s) for s in shards.tolist()]


def plan_scale(
    src: Scale, dst: Scale, src_names: Sequence[str], dst_names: Sequence[str] = ()
) -> list[Task[str]]:
    """Tasks converting the objects ``src_names`` of ``src`` (file names in the scale
    folder); ``dst_names``: objects of ``dst`` written by an interrupted run."""
    src_names = sorted(src_names)
    if dst.sharding is not None:
        spec = dst.sharding
        done = set(dst_names)
        groups_: dict[int, list[str]] = {}
        for name, shard in zip(src_names, _shards_of(src, spec, src_names), strict=True):
            groups_.setdefault(shard, []).append(name)
        kinds: dict[bool, TaskKind] = {True: "index", False: "pack"}
        return [
            Task(kinds[spec.shard_filename(shard) in done], spec.shard_filename(shard), tuple(m))
            for shard, m in sorted(groups_.items())
        ]
    assert src.sharding is not None
    by_shard: dict[int, list[str]] = {}
    written = sorted(dst_names)
    for name, shard in zip(written, _shards_of(dst, src.sharding, written), strict=True):
        by_shard.setdefault(shard, []).append(name)
    return [
        Task(
            "unpack",
            None,
            (name,),
            tuple(by_shard.get(src.sharding.parse_shard_filename(name) or 0, ())),
        )
        for name in src_names
    ]


class ScalePlan:
    """The plan of a scale's pass, from the file names listed.

    Args:
        src: the scale as the pass reads it.
        dst: the scale as it writes it.
    """

    def __init__(self, src: Scale, dst: Scale) -> None:
        self.src, self.dst = src, dst
        spec = dst.sharding or src.sharding
        assert spec is not None
        self.spec = spec
        self.pack = dst.sharding is not None
        self.bits = sum(src.morton_bits)
        self.spills = spec.shard_bits + self.bits <= 63
        self.ignored = 0
        self.found = 0
        self._count = 0
        self._names: list[str] = []
        self._done_names: list[str] = []
        self._sources, self._done = SortedSpill(), SortedSpill()

    @property
    def sources(self) -> int:
        """Source files planned (once :meth:`tasks` has run)."""
        return self._count if self.spills else len(self._names)

    def add_source(self, obj: Hashable) -> None:
        """A source file found."""
        self._names.append(str(obj))
        if self.spills and len(self._names) >= _BATCH:
            self._flush()

    def add_done(self, obj: Hashable) -> None:
        """A target file found."""
        self.found += 1
        self._done_names.append(str(obj))
        if self.spills and len(self._done_names) >= _BATCH:
            self._flush()

    def _codes(self, scale: Scale, names: Sequence[str]) -> Codes:
        """Shard number above chunk id, for unsharded chunk names of ``scale``."""
        if not names:
            return np.empty(0, dtype=np.uint64)
        positions = np.array([scale.parse_chunk_name(n) for n in names], dtype=np.int64)
        ids = scale.chunk_ids(positions)
        shards, _ = self.spec.shard_and_minishard(ids)
        return (shards << np.uint64(self.bits)) | ids

    def _shards(self, names: Sequence[str]) -> list[int]:
        return [n for n in map(self.spec.parse_shard_filename, names) if n is not None]

    def _flush(self) -> None:
        if self.pack:
            self._sources.add(self._codes(self.src, self._names))
            self._done.add(self._shards(self._done_names))
        else:
            self._sources.add(self._shards(self._names))
            self._done.add(self._codes(self.dst, self._done_names))
        self._names.clear()
        self._done_names.clear()

    def count(self) -> int:
        """How many tasks."""
        if not self.spills:
            return len(plan_scale(self.src, self.dst, self._names, self._done_names))
        return sum(1 for _ in self._plan())

    def tasks(self) -> Iterator[Task[str]]:
        """The tasks, made as they are taken."""
        if not self.spills:
            yield from plan_scale(self.src, self.dst, self._names, self._done_names)
            return
        for kind, target, sources, existing in self._plan():
            yield Task(kind, target, sources(), existing())

    def _plan(self) -> Iterator[tuple[TaskKind, str | None, Names, Names]]:
        self._flush()
        self._count = 0
        return self._packs() if self.pack else self._unpacks()

    def _chunk_names(self, scale: Scale, codes: Codes) -> Names:
        ids = codes & np.uint64((1 << self.bits) - 1)
        return lambda: tuple(map(scale.chunk_name, scale.grid_positions_of(ids).tolist()))

    def _packs(self) -> Iterator[tuple[TaskKind, str | None, Names, Names]]:
        done = Cursor(self._done.blocks())
        for shard, codes in groups(self._sources.blocks(), 1 << self.bits):
            self._count += codes.size
            kind: TaskKind = "index" if done.has(shard) else "pack"
            names = self._chunk_names(self.src, codes.copy())
            yield kind, self.spec.shard_filename(shard), names, _none

    def _unpacks(self) -> Iterator[tuple[TaskKind, str | None, Names, Names]]:
        for number, done in with_done(self._sources.blocks(), self._done.blocks(), 1 << self.bits):
            self._count += 1
            existing = _none if done is None else self._chunk_names(self.dst, done.copy())
            yield "unpack", None, _names((self.spec.shard_filename(number),)), existing

    def close(self) -> None:
        """Remove the spilled runs."""
        self._sources.close()
        self._done.close()


def _none() -> tuple[str, ...]:
    return ()


def _names(names: tuple[str, ...]) -> Names:
    return lambda: names
