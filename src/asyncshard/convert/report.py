"""What conversions report: per-task results, progress events, the final summary."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from asyncshard.formats.zarr3.keys import Coords

__all__ = [
    "ArrayReport",
    "ConversionSummary",
    "PassDone",
    "PassStarted",
    "ProgressCallback",
    "ProgressEvent",
    "TaskDone",
    "TaskResult",
    "decimal_size",
    "describe_change",
]


@dataclass(frozen=True)
class TaskResult:
    """What one task did. ``chunks`` are the inner-chunk coords now stored in the target
    (Zarr; empty for precomputed, which has no manifest), ``nchunks`` their number."""

    nchunks: int
    objects_written: int
    bytes_read: int
    bytes_written: int
    chunks: tuple[Coords, ...] = ()
    resumed: bool = False


@dataclass(frozen=True)
class PassStarted:
    """A pass of one array (or precomputed scale) starts with ``tasks`` tasks."""

    array: str
    index: int
    passes: int
    tasks: int
    description: str


@dataclass(frozen=True)
class TaskDone:
    """One task of the current pass finished."""

    array: str
    result: TaskResult


@dataclass(frozen=True)
class PassDone:
    """The pass switched its metadata and removed the old objects."""

    array: str
    index: int


ProgressEvent = PassStarted | TaskDone | PassDone
ProgressCallback = Callable[[ProgressEvent], None]


@dataclass
class ArrayReport:
    """What happened to one array (or precomputed scale).

    ``source``/``target``: the layouts before and after (``flat (c/0/1)``, ``sharded 4x4
    (c/0/1)``, precomputed ``sharded``/``unsharded``); ``format``: what the array is
    (``Zarr v3``, ``Zarr v2 → v3`` for a copy, ``precomputed``); ``ome``: its OME-Zarr
    version when it belongs to an OME-Zarr image (``0.5``, ``0.4 → 0.5`` for a copy);
    ``shards``: the shards holding its chunks, for a sharded result.
    """

    path: str
    action: Literal["converted", "skipped", "manifest"]
    source: str = ""
    target: str = ""
    reason: str = ""
    passes: int = 0
    chunks: int = 0
    objects_written: int = 0
    objects_deleted: int = 0
    objects_ignored: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    resumed: bool = False
    notes: list[str] = field(default_factory=list)
    format: str = ""
    ome: str = ""
    shards: int = 0

    def add(self, result: TaskResult) -> None:
        """Account for one task result."""
        self.objects_written += result.objects_written
        self.bytes_read += result.bytes_read
        self.bytes_written += result.bytes_written
        self.resumed = self.resumed or result.resumed

    def __str__(self) -> str:
        return self.line(copy=False)

    def line(self, copy: bool) -> str:
        """One line in plain words; ``copy``: the result went to another location."""
        name = self.path or "/"
        if self.action == "skipped":
            return f"{name}: {'skipped' if copy else 'left as it is'} ({self.reason})"
        if self.action == "manifest":
            return f"{name}: {self.reason}"
        what = ", ".join(
            part for part in (self.format, f"OME-Zarr {self.ome}" if self.ome else "") if part
        )
        counts = [self._moved(copy)]
        if not copy:
            counts.append(f"{_count(self.objects_deleted, 'superseded object')} removed")
        passes = f" in {self.passes} passes" if self.passes > 1 else ""
        counts.append(f"{decimal_size(self.bytes_written)} written{passes}")
        resumed = ["an interrupted run finished"] if self.resumed else []
        tail = "".join(f"; {n}" for n in (*self.notes, *resumed))
        return (
            f"{name}: {what + ', ' if what else ''}{describe_change(self.source, self.target)}: "
            + (", ".join(counts) + tail)
        )

    def _moved(self, copy: bool) -> str:
        verb = "copied" if copy else "moved"
        chunks = _count(self.chunks, "chunk")
        if self.target.startswith("sharded") and self.shards:
            return f"{chunks} {verb} into {_count(self.shards, 'shard')}"
        if self.target.startswith("flat"):
            return f"{chunks} {verb}, one object each"
        return f"{chunks} {verb}"


_LAYOUT = re.compile(r"^(flat|sharded|unsharded)(?: ([\dx]+|\(\)))?(?: \((.+)\))?$")


def describe_change(source: str, target: str) -> str:
    """A layout change in words: ``flat → sharded (2x2 chunks per shard)``, and the chunk
    keys when they change (``, chunk keys c/0/1 → c.0.1``).

    Args:
        source: The layout before, as :class:`ArrayReport` writes it (``flat (c/0/1)``).
        target: The layout after (``sharded 2x2 (c/0/1)``).
    """
    before, after = _LAYOUT.match(source), _LAYOUT.match(target)
    if before is None or after is None:
        return f"{source} → {target}"

    def layout(kind: str, shape: str | None) -> str:
        if not shape:
            return kind
        return f"{kind} ({shape} {'chunk' if shape == '1' else 'chunks'} per shard)"

    text = f"{layout(*before.groups()[:2])} → {layout(*after.groups()[:2])}"
    old_keys, keys = before.group(3), after.group(3)
    if keys and old_keys and keys != old_keys:
        text += f", chunk keys {old_keys} → {keys}"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def decimal_size(n: int) -> str:
    """Bytes in decimal units: ``512 B``, ``24.6 kB``, ``3.1 MB``, ``1.2 GB``.

    Args:
        n: The number of bytes.
    """
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass
class ConversionSummary:
    """The result of a conversion: one :class:`ArrayReport` per array found.

    ``location``: the URL converted in place, or the source of a copy; ``destination``:
    where a copy went (``None``: converted in place).
    """

    arrays: list[ArrayReport] = field(default_factory=list)
    seconds: float = 0.0
    location: str = ""
    destination: str | None = None

    @property
    def arrays_changed(self) -> list[str]:
        """Paths of the arrays converted by this run."""
        return [a.path for a in self.arrays if a.action == "converted"]

    @property
    def chunks_moved(self) -> int:
        """Chunks now stored in a new layout."""
        return sum(a.chunks for a in self.arrays if a.action == "converted")

    @property
    def bytes_moved(self) -> int:
        """Bytes written by this run."""
        return sum(a.bytes_written for a in self.arrays)

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """``(path, reason)`` of the arrays left alone."""
        return [(a.path, a.reason) for a in self.arrays if a.action == "skipped"]

    def to_json(self) -> dict[str, object]:
        """A JSON-able summary (``asyncshard shard --json``; keys in docs/conversion.md)."""
        return {
            "location": self.location,
            "destination": self.destination,
            "in_place": self.destination is None,
            "arrays_changed": self.arrays_changed,
            "chunks_moved": self.chunks_moved,
            "bytes_moved": self.bytes_moved,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "seconds": round(self.seconds, 3),
            "arrays": [vars(a) for a in self.arrays],
        }

    def __str__(self) -> str:
        copy = self.destination is not None
        lines = [a.line(copy) for a in self.arrays]
        changed, skipped = len(self.arrays_changed), len(self.skipped)
        noun = "scale" if all(a.format == "precomputed" for a in self.arrays) else "array"
        done = f"{_count(changed, noun)} {'copied' if copy else 'converted'}"
        if copy:
            where = f"from {self.location} to {self.destination} (the source is unchanged)"
        else:
            where = f"in place at {self.location}" if self.location else "in place"
        shards = sum(a.shards for a in self.arrays if a.action == "converted")
        moved = _count(self.chunks_moved, "chunk") + (
            f" in {_count(shards, 'shard')}" if shards else ""
        )
        left = f", {skipped} left as {'it was' if skipped == 1 else 'they were'}"
        left = (f", {skipped} skipped" if copy else left) if skipped else ""
        lines.append(
            f"Total: {done} {where}{left}; {moved}, "
            f"{decimal_size(self.bytes_moved)} written in {self.seconds:.1f} s"
        )
        return "\n".join(lines)
