"""What conversions report: per-task results, progress events, the final summary."""

from __future__ import annotations

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
    """What happened to one array (or precomputed scale)."""

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

    def add(self, result: TaskResult) -> None:
        """Account for one task result."""
        self.objects_written += result.objects_written
        self.bytes_read += result.bytes_read
        self.bytes_written += result.bytes_written
        self.resumed = self.resumed or result.resumed

    def __str__(self) -> str:
        if self.action == "skipped":
            return f"{self.path or '/'}: skipped ({self.reason})"
        if self.action == "manifest":
            return f"{self.path or '/'}: {self.reason}"
        resumed = ", resumed" if self.resumed else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return (
            f"{self.path or '/'}: {self.source} -> {self.target}: {self.chunks} chunks, "
            f"{self.objects_written} objects written, {self.objects_deleted} removed, "
            f"{self.bytes_written / 1e6:.1f} MB in {self.passes} pass"
            f"{'es' if self.passes != 1 else ''}{resumed}{notes}"
        )


@dataclass
class ConversionSummary:
    """The result of a conversion: one :class:`ArrayReport` per array found."""

    arrays: list[ArrayReport] = field(default_factory=list)
    seconds: float = 0.0

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
        """A JSON-able summary (``asyncshard shard --json``)."""
        return {
            "arrays_changed": self.arrays_changed,
            "chunks_moved": self.chunks_moved,
            "bytes_moved": self.bytes_moved,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "seconds": round(self.seconds, 3),
            "arrays": [vars(a) for a in self.arrays],
        }

    def __str__(self) -> str:
        lines = [str(a) for a in self.arrays]
        lines.append(
            f"{len(self.arrays_changed)} converted, {len(self.skipped)} skipped, "
            f"{self.chunks_moved} chunks moved, {self.bytes_moved / 1e6:.1f} MB written "
            f"in {self.seconds:.1f} s"
        )
        return "\n".join(lines)
