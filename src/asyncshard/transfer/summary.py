"""What a whole-tree copy reports: its summary, its progress events, its memory budget."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from asyncshard.convert.report import decimal_size

__all__ = ["ByteBudget", "CopiedObject", "CopySummary"]

#: Failed keys a summary keeps (with their errors); the count covers them all.
KEPT_FAILURES = 20

Outcome = Literal["copied", "skipped", "failed"]


@dataclass(frozen=True, slots=True)
class CopiedObject:
    """One object a copy is done with: its source ``key``, the ``outcome`` (``copied``,
    ``skipped``: already equal at the destination, or ``failed``) and its ``size``."""

    key: str
    outcome: Outcome
    size: int


@dataclass
class CopySummary:
    """What :func:`~asyncshard.copy_tree` did.

    ``copied`` objects were written (``bytes_copied`` bytes), ``skipped`` ones were
    already equal at the destination (``bytes_skipped`` bytes), ``failed`` ones were not
    copied; ``failures`` names the first ones with their errors.
    """

    copied: int = 0
    skipped: int = 0
    failed: int = 0
    bytes_copied: int = 0
    bytes_skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def add(self, done: CopiedObject, error: BaseException | None = None) -> None:
        """Count ``done`` (and the error of a failed object)."""
        if done.outcome == "copied":
            self.copied += 1
            self.bytes_copied += done.size
        elif done.outcome == "skipped":
            self.skipped += 1
            self.bytes_skipped += done.size
        else:
            self.failed += 1
            if len(self.failures) < KEPT_FAILURES:
                message = f"{type(error).__name__}: {error}" if error else "failed"
                self.failures.append((done.key, message))

    @property
    def objects(self) -> int:
        """Objects the copy went through."""
        return self.copied + self.skipped + self.failed

    def __str__(self) -> str:
        size = decimal_size(self.bytes_copied)
        text = f"{_objects(self.copied)} copied ({size}), {self.skipped} already equal"
        if self.failed:
            text += f", {self.failed} failed"
        return text

    def failure_lines(self, limit: int = 5) -> list[str]:
        """The first ``limit`` failed keys with their errors, one line each."""
        lines = [f"  {key}: {message}" for key, message in self.failures[:limit]]
        if self.failed > len(lines):
            lines.append(f"  ... and {self.failed - len(lines)} more")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data."""
        return {
            "copied": self.copied,
            "skipped": self.skipped,
            "failed": self.failed,
            "bytes_copied": self.bytes_copied,
            "bytes_skipped": self.bytes_skipped,
            "failures": [{"key": k, "error": e} for k, e in self.failures],
        }


def _objects(n: int) -> str:
    return f"{n} object" if n == 1 else f"{n} objects"


class ByteBudget:
    """At most ``limit`` bytes held at once by the objects being copied: each holds its
    share from before its first read until its last byte is handed over. A share larger
    than the limit is cut to the limit (it then runs alone)."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("the buffer bound must be > 0 bytes")
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._waiters: list[asyncio.Future[None]] = []

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes (at most the limit) fit; the bytes taken."""
        size = min(size, self.limit)
        while self.used + size > self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += size
        self.peak = max(self.peak, self.used)
        return size

    def release(self, size: int) -> None:
        """Give back bytes :meth:`acquire` took; the waiters try again."""
        self.used -= size
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
