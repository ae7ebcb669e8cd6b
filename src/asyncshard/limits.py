"""A concurrency bound that holds per event loop.

A store can be used from several event loops (in turn, or at once from several
threads), and an ``asyncio.Semaphore`` belongs to the loop that first waits on it.
:class:`LoopSemaphores` hands each loop its own semaphore of the same size.
"""

from __future__ import annotations

import asyncio
import weakref

__all__ = ["LoopSemaphores"]


class LoopSemaphores:
    """One ``asyncio.Semaphore(size)`` per running event loop.

    They live in a ``WeakKeyDictionary`` keyed by the loop, so a store used from several
    loops keeps every loop's bound instead of handing out a fresh semaphore on each
    switch. A semaphore that once made a task wait references its loop, which would keep
    the entry alive: entries of closed loops are dropped whenever a new loop arrives.
    """

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError("a concurrency bound must be > 0")
        self.size = size
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._by_loop = weakref.WeakKeyDictionary()

    def get(self) -> asyncio.Semaphore:
        """The running event loop's semaphore."""
        loop = asyncio.get_running_loop()
        by_loop = self._by_loop
        sem = by_loop.get(loop)
        if sem is None:
            for ref in by_loop.keyrefs():  # a list copy: safe while other threads insert
                old = ref()
                if old is not None and old.is_closed():
                    by_loop.pop(old, None)
            sem = by_loop.setdefault(loop, asyncio.Semaphore(self.size))
        return sem
