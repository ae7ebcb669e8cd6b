"""What ``verify`` and ``repair`` found and did, as text and as JSON."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DamagedShard:
    """One shard that does not read back whole.

    ``faults``: what hides which chunks it affects (an unreadable index); ``lost``: chunk
    key -> why that chunk cannot be read; ``intact``: how many chunks still read;
    ``restored``: keys of lost chunks ``repair --from`` put back (no longer in ``lost``);
    ``action``: what ``repair`` did (or would do, with ``dry_run``), ``None`` for
    ``verify``.
    """

    dataset: str
    key: str
    faults: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)
    intact: int = 0
    action: str | None = None
    restored: list[str] = field(default_factory=list)

    def restore(self, fmt: Any, shard_key: str, chunks: Iterable[Any]) -> None:
        """Move ``chunks`` (the format's chunk names) from ``lost`` to ``restored``."""
        for chunk in chunks:
            key = fmt.chunk_key(shard_key, chunk) or f"{shard_key}#{chunk}"
            self.lost.pop(key, None)
            self.restored.append(key)
        self.restored.sort()

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "key": self.key,
            "faults": self.faults,
            "lost": self.lost,
            "intact": self.intact,
            "restored": self.restored,
            "action": self.action,
        }


@dataclass
class IntegrityReport:
    """The outcome of one ``verify`` or ``repair`` run."""

    datasets: list[str] = field(default_factory=list)
    shards: int = 0
    chunks: int = 0
    damaged: list[DamagedShard] = field(default_factory=list)
    decoded: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every shard read back whole."""
        return not self.damaged

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "datasets": self.datasets,
            "shards": self.shards,
            "chunks": self.chunks,
            "decoded": self.decoded,
            "damaged": [d.to_json() for d in self.damaged],
            "seconds": round(self.seconds, 3),
        }

    def __str__(self) -> str:
        lines = []
        for d in self.damaged:
            what = "; ".join(d.faults) if d.faults else f"{len(d.lost)} chunks lost"
            if d.restored:
                what += f", {len(d.restored)} restored"
            action = f" -> {d.action}" if d.action else ""
            lines.append(f"DAMAGED {d.key} ({d.dataset}): {what}, {d.intact} intact{action}")
            lines.extend(f"  lost {key}: {reason}" for key, reason in sorted(d.lost.items()))
            lines.extend(f"  restored {key}" for key in d.restored)
            lines.extend(f"  fault: {fault}" for fault in d.faults)
        state = "all intact" if self.ok else f"{len(self.damaged)} damaged"
        lines.append(
            f"{len(self.datasets)} datasets, {self.shards} shards, {self.chunks} intact chunks"
            f"{' (decoded)' if self.decoded else ''}: {state} ({self.seconds:.1f} s)"
        )
        return "\n".join(lines)
