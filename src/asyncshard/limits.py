"""Values that hold per event loop: concurrency bounds, and any state of its own.

A store can be used from several event loops (in turn, or at once from several
threads), and an ``asyncio.Semaphore`` belongs to the loop that first waits on it.
:class:`PerLoop` hands each loop its own value; :class:`LoopSemaphores` its own
semaphore of the same size.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LoopSemaphores", "PerLoop"]

T = TypeVar("T")


class PerLoop(Generic[T]):
    """One value made by ``factory`` per running event loop.

    They live in a ``WeakKeyDictionary`` keyed by the loop, so an object used from
    several loops keeps every loop's value instead of making a fresh one on each switch,
    and each loop's value is only touched from that loop's thread. A value that refers
    to its loop (a semaphore that once made a task wait, a pending timer) would keep the
    entry alive: entries of closed loops are dropped whenever a new loop arrives.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T]
        self._by_loop = weakref.WeakKeyDictionary()

    def get(self) -> T:
        """The running event loop's value."""
        loop = asyncio.get_running_loop()
        by_loop = self._by_loop
        value = by_loop.get(loop)
        if value is None:
            for ref in by_loop.keyrefs():  # a list copy: safe while other threads insert
                old = ref()
                if old is not None and old.is_closed():
                    by_loop.pop(old, None)
            value = by_loop.setdefault(loop, self._factory())
        return value


class LoopSemaphores(PerLoop[asyncio.Semaphore]):
    """One ``asyncio.Semaphore(size)`` per running event loop."""

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError("a concurrency bound must be > 0")
        self.size = size
        super().__init__(lambda: asyncio.Semaphore(size))
