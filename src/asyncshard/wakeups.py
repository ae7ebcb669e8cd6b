"""Waking asyncio waiters from any thread: a future resolved on its own loop, a timer
armed on the loop that waits for it.

A :class:`~asyncshard.window.Window` is shared by stores used from several event loops
in several threads (Dask workers, zarr-python's sync thread, asyncshard's background
loop). A place freed on one loop may go to a waiter of another, and a pacing pause armed
while one loop dispatches must fire even if that loop ends first: so a grant goes to the
waiter's loop (:func:`grant`), and a timer to the loop of the waiter it is for
(:class:`Timers`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Timers", "grant", "running_loop"]

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop of this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def grant(future: asyncio.Future[T], value: T, give_back: Callable[[T], None]) -> None:
    """Resolve ``future`` with ``value`` on the future's loop; ``give_back(value)`` if
    nobody will take it (the future was cancelled meanwhile, or its loop is closed)."""

    def give() -> None:
        if future.done():
            give_back(value)
        else:
            future.set_result(value)

    loop = future.get_loop()
    if loop is running_loop():
        give()
        return
    try:
        loop.call_soon_threadsafe(give)
    except RuntimeError:  # its loop is closed
        give_back(value)


class Timers:
    """At most one pending wake-up per loop that matters: ``fire()`` is called on
    ``loop`` at ``due`` (``time.monotonic()``), unless one on that loop comes sooner."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._due: dict[asyncio.AbstractEventLoop, float] = {}
        self._lock = threading.Lock()

    def arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        """Call ``fire()`` on ``loop`` at ``due``, from any thread."""
        with self._lock:
            for gone in [other for other in self._due if other.is_closed()]:
                del self._due[gone]
            armed = self._due.get(loop)
            if armed is not None and armed <= due + 1e-4:
                return  # one on this loop fires sooner
            self._due[loop] = due

        def start() -> None:
            loop.call_later(max(0.0, due - time.monotonic()), self._fired, loop, due)

        if loop is running_loop():
            start()
            return
        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # closed meanwhile: what waited on it is gone too
            with self._lock:
                self._due.pop(loop, None)

    def _fired(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        with self._lock:
            if self._due.get(loop) == due:
                del self._due[loop]
        self._fire()
