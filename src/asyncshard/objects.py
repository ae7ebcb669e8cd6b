"""What stores hold and report: object metadata, read results, write conditions and the
conflict-retry loop of read-modify-writes, and the cost counters."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from asyncshard.buffers import BytesLike, Data
from asyncshard.errors import ConflictError

T = TypeVar("T")

CONFLICT_RETRIES = 32
#: Seconds a read-modify-write keeps retrying an object that keeps changing under it
#: (once :data:`CONFLICT_RETRIES` attempts are spent too): see :func:`retry_on_conflict`.
CONFLICT_PATIENCE = 30.0


def apply_runs(current: BytesLike | None, runs: Iterable[tuple[int, BytesLike]]) -> bytearray:
    """``current`` (``None`` = empty) with each ``(start, bytes)`` run written over it.

    A run starting past the end zero-fills the gap.
    """
    buf = bytearray(b"" if current is None else current)
    for start, value in runs:
        if start > len(buf):
            buf.extend(bytes(start - len(buf)))
        buf[start : start + len(value)] = value
    return buf


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]],
    key: str,
    *,
    attempts: int = CONFLICT_RETRIES,
    patience: float = CONFLICT_PATIENCE,
) -> T:
    """Run a read-modify-write ``attempt`` until it does not raise ``ConflictError``.

    Retries sleep a random, exponentially growing time (capped at 0.25 s) so that
    concurrent writers of one object spread out instead of colliding again. Every
    conflict means another writer's write landed, so a writer that keeps losing on a busy
    object waits its turn: it gives up (``ConflictError``) only once it has made
    ``attempts`` attempts *and* ``patience`` seconds have passed.
    """
    started = time.monotonic()
    n = 0
    while True:
        try:
            return await attempt()
        except ConflictError:
            n += 1
            if n >= attempts and time.monotonic() - started >= patience:
                break
            await asyncio.sleep(random.uniform(0, min(0.25, 0.002 * 2 ** min(n - 1, 8))))
    raise ConflictError(
        f"{key}: gave up after {n} conflicting concurrent writes in "
        f"{time.monotonic() - started:.1f} s",
        key=key,
    )


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a store knows about an object without reading it."""

    key: str
    size: int
    version: str | None = None
    last_modified: datetime | None = None


@dataclass(frozen=True, slots=True)
class GetResult:
    """Bytes read from an object (the whole object or a range) and its metadata."""

    data: Data
    meta: ObjectMeta


class WouldWait:
    """The answer of :meth:`~asyncshard.store.Store.get_now` when the store cannot read
    without waiting (use :meth:`~asyncshard.store.Store.get_object`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WOULD_WAIT"


#: The one :class:`WouldWait` instance.
WOULD_WAIT = WouldWait()
#: What :meth:`~asyncshard.store.Store.get_now` answers.
NowResult = GetResult | WouldWait | None


def check_condition(
    key: str, current: ObjectMeta | None, if_match: str | None, if_absent: bool = False
) -> None:
    """Raise ``ConflictError`` unless ``current`` satisfies the write/read condition."""
    if if_absent and current is not None:
        raise ConflictError(f"{key}: object already exists", key=key)
    if if_match is not None and (current is None or current.version != if_match):
        raise ConflictError(f"{key}: object is not at version {if_match}", key=key)


@dataclass
class StoreStats:
    """Cost counters: requests by kind and bytes moved. Tests assert budgets on these."""

    requests: Counter[str] = field(default_factory=Counter)
    bytes_fetched: int = 0
    bytes_returned: int = 0
    bytes_written: int = 0

    @property
    def total_requests(self) -> int:
        """All requests of every kind."""
        return sum(self.requests.values())

    def reset(self) -> None:
        """Zero every counter."""
        self.requests.clear()
        self.bytes_fetched = self.bytes_returned = self.bytes_written = 0
