"""What ``verify`` and ``repair`` found and did, as text and as JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DamagedShard:
    """One shard that does not read back whole.

    ``faults``: what hides which chunks it affects (an unreadable index); ``lost``: chunk
    key -> why that chunk cannot be read; ``intact``: how many chunks still read;
    ``restored``: keys of lost chunks ``repair --from`` put back (no longer in ``lost``);
    ``not_restored``: chunk key -> why the source's copy was not used (it fails the
    checks, or the source could not be read); ``action``: what ``repair`` did (or would
    do, with ``dry_run``), ``None`` for ``verify``; ``repaired``: the shard was rewritten
    and nothing in it is lost any more.
    """

    dataset: str
    key: str
    faults: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)
    intact: int = 0
    action: str | None = None
    restored: list[str] = field(default_factory=list)
    not_restored: dict[str, str] = field(default_factory=dict)
    repaired: bool = False

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
            "not_restored": self.not_restored,
            "action": self.action,
            "repaired": self.repaired,
        }


@dataclass
class IntegrityReport:
    """The outcome of one ``verify`` or ``repair`` run.

    ``chunks``: intact chunks; ``unverified``: why some of them could not be checked
    (no checksum codec, not decoded) -> how many.
    """

    datasets: list[str] = field(default_factory=list)
    shards: int = 0
    chunks: int = 0
    damaged: list[DamagedShard] = field(default_factory=list)
    decoded: bool = False
    seconds: float = 0.0
    unverified: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """Whether every shard read back whole."""
        return not self.damaged

    @property
    def remaining(self) -> list[DamagedShard]:
        """The damaged shards not repaired (all of them after ``verify`` or a dry run)."""
        return [d for d in self.damaged if not d.repaired]

    @property
    def exit_code(self) -> int:
        """As fsck: 0 when intact or every damaged shard was repaired, 1 when damage
        remains."""
        return 1 if self.remaining else 0

    @property
    def verified(self) -> int:
        """Intact chunks whose bytes a check reached."""
        return self.chunks - sum(self.unverified.values())

    def _counts(self) -> dict[str, int]:
        return {
            "lost": sum(len(d.lost) for d in self.damaged),
            "restored": sum(len(d.restored) for d in self.damaged),
            "not_restored": sum(len(d.not_restored) for d in self.damaged),
            "repaired": len(self.damaged) - len(self.remaining),
            "remaining": len(self.remaining),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "datasets": self.datasets,
            "shards": self.shards,
            "chunks": self.chunks,
            "verified": self.verified,
            "unverified": dict(sorted(self.unverified.items())),
            "decoded": self.decoded,
            **self._counts(),
            "damaged": [d.to_json() for d in self.damaged],
            "seconds": round(self.seconds, 3),
        }

    def __str__(self) -> str:
        lines = []
        for d in self.damaged:
            what = "; ".join(d.faults) if d.faults else f"{len(d.lost)} chunks lost"
            if d.restored:
                what += f", {len(d.restored)} restored"
            if d.not_restored:
                what += f", {len(d.not_restored)} not restored"
            action = f" -> {d.action}" if d.action else ""
            lines.append(f"DAMAGED {d.key} ({d.dataset}): {what}, {d.intact} intact{action}")
            lines.extend(f"  lost {key}: {reason}" for key, reason in sorted(d.lost.items()))
            lines.extend(f"  restored {key}" for key in d.restored)
            lines.extend(
                f"  not restored {key}: {why}" for key, why in sorted(d.not_restored.items())
            )
            lines.extend(f"  fault: {fault}" for fault in d.faults)
        lines.append(
            f"{_count(len(self.datasets), 'dataset')}, {_count(self.shards, 'shard')}, "
            f"{_count(self.chunks, 'intact chunk')}"
            f"{' (decoded)' if self.decoded else ''}: {self.verified} checked intact"
            + "".join(f", {n} not verifiable ({why})" for why, n in sorted(self.unverified.items()))
        )
        if self.damaged:
            c = self._counts()
            lines.append(
                f"{_count(len(self.damaged), 'damaged shard')}: {_count(c['lost'], 'chunk')} "
                f"lost, {c['restored']} restored, {c['not_restored']} not restored; "
                f"{_count(c['repaired'], 'shard')} repaired, {c['remaining']} with damage "
                "remaining"
            )
        if not self.damaged:
            state = "all intact" if not self.unverified else "no damage found"
        else:
            state = "damage remains" if self.remaining else "all damage repaired"
        lines.append(f"{state} ({self.seconds:.1f} s)")
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
