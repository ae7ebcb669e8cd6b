"""Dropping clients that stop reading: a write pending too long aborts its connection.

A timer per write (``asyncio.timeout``) costs a heap push and pop on the event loop for
every response, a tenth of the CPU time of a small chunk answered; instead every write
is only noted in a dict while it is pending, and one task per server sweeps that dict
a few times per timeout and aborts the transports of writes older than the timeout.
Aborting the transport ends the handler (cancelled by aiohttp, or its pending write
fails with ``ConnectionResetError``), which returns its share of the body budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

log = logging.getLogger("asyncshard.server")


class StallWatch:
    """Writes in progress and when they began; :meth:`run` drops the stalled ones."""

    def __init__(self, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError("the write timeout must be positive")
        self.timeout = timeout
        self.dropped = 0
        self._pending: dict[int, tuple[float, asyncio.Transport]] = {}
        self._seq = 0

    def begin(self, transport: asyncio.Transport) -> int:
        """Note a write to ``transport`` beginning now; a token for :meth:`end` (a plain
        pair of calls, cheaper than a context manager per write)."""
        self._seq += 1
        self._pending[self._seq] = (asyncio.get_running_loop().time(), transport)
        return self._seq

    def end(self, token: int) -> None:
        """The write of ``token`` is over (the sweep may have dropped it already)."""
        self._pending.pop(token, None)

    def sweep(self, now: float) -> None:
        """Abort the transports of writes pending since before ``now - timeout``."""
        oldest = now - self.timeout
        for token, (began, transport) in list(self._pending.items()):
            if began <= oldest:
                del self._pending[token]
                self.dropped += 1
                log.warning("dropped a client that read nothing for %gs", self.timeout)
                transport.abort()

    async def run(self) -> None:
        """Sweep four times per timeout (at most every second), until cancelled."""
        loop = asyncio.get_running_loop()
        period = min(self.timeout / 4, 1.0)
        while True:
            await asyncio.sleep(period)
            self.sweep(loop.time())

    async def sweeping(self, _app: object) -> AsyncIterator[None]:
        """Run :meth:`run` while the application runs (an aiohttp ``cleanup_ctx``)."""
        task = asyncio.create_task(self.run(), name="asyncshard-stall-watch")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
