"""A server-wide budget of body bytes held in memory (the bound under slow clients).

Every piece of a response body is reserved here before the store read that fetches it
and returned once the piece is written to the socket (or the request ends: a failure, a
client that disconnects, a write timeout). The budget shrinks the pieces it hands out
when it runs low, so that many slow clients cannot starve the others:

* while more than half of the budget stays free after a reservation, a reservation gets
  what it asks for (up to the server's piece size, 4 MiB);
* otherwise it gets at most ``small`` bytes (64 KiB), and waits (first come, first
  served) while even that is not free.

So with the default 128 MiB budget, about 16 full pieces and then about a thousand
small ones are in flight before anyone waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

#: Size of the pieces handed out when the budget runs low.
SMALL_PIECE = 64 * 1024


class ByteBudget:
    """Bytes reserved by the requests of one server, at most ``total`` at a time."""

    def __init__(self, total: int, *, small: int = SMALL_PIECE) -> None:
        if total <= 0 or small <= 0:
            raise ValueError("the budget and its small piece size must be positive")
        self.total = total
        self.small = min(small, total)
        self.free = total
        self._waiters: deque[tuple[asyncio.Future[int], int]] = deque()

    def _grant(self, want: int) -> int | None:
        """Take the bytes a reservation of ``want`` gets now, or ``None`` if it must wait."""
        size = want if self.free - want >= self.total // 2 else min(want, self.small)
        if size > self.free:
            return None
        self.free -= size
        return size

    def mostly_free(self, size: int) -> bool:
        """Whether ``size`` bytes would leave at most a 64th of the budget in use (and
        nobody waits): no client is holding bytes back."""
        return not self._waiters and self.free - size >= self.total - self.total // 64

    def try_reserve(self, size: int) -> Reservation | None:
        """``size`` bytes now, or ``None`` when they are not free at once (or others
        wait): for bytes already read, which a caller may drop instead of waiting."""
        granted = None if self._waiters else self._grant(size)
        if granted is None:
            return None
        if granted != size:  # only a smaller piece was free
            self.release(granted)
            return None
        return Reservation.held(self, size)

    async def acquire(self, want: int) -> int:
        """Reserve up to ``want`` (> 0) bytes; return how many were reserved (>= 1)."""
        if not self._waiters:
            size = self._grant(want)
            if size is not None:
                return size
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, want))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # granted, but the request went away
            raise

    def release(self, size: int) -> None:
        """Return ``size`` reserved bytes and wake the waiters they satisfy, in order."""
        self.free += size
        while self._waiters:
            waiter, want = self._waiters[0]
            if waiter.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            granted = self._grant(want)
            if granted is None:
                return
            self._waiters.popleft()
            waiter.set_result(granted)

    def reserve(self, want: int) -> Reservation:
        """``async with budget.reserve(want) as r``: ``r.size`` bytes until the block ends."""
        return Reservation(self, want)


class Reservation:
    """Bytes of a :class:`ByteBudget`, returned when the ``async with`` block ends."""

    def __init__(self, budget: ByteBudget, want: int) -> None:
        self._budget = budget
        self._want = want
        self.size = 0

    @classmethod
    def held(cls, budget: ByteBudget, size: int) -> Reservation:
        """A reservation of ``size`` bytes already taken from ``budget``."""
        reservation = cls(budget, size)
        reservation.size = size
        return reservation

    async def __aenter__(self) -> Reservation:
        self.size = await self._budget.acquire(self._want)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def keep(self, size: int) -> None:
        """Return all but ``size`` bytes (a read came back shorter than reserved)."""
        if size < self.size:
            self._budget.release(self.size - size)
            self.size = size

    def release(self) -> None:
        """Return every byte now (idempotent)."""
        self.keep(0)
