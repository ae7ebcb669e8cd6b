"""The event loop of asyncshard's own entry points: uvloop where it is installed.

The command line, the server, the synchronous twins of the conversion functions and the
background loop of the synchronous store calls (:mod:`asyncshard.blocking`) create
their loops here. Code that runs its own loop (``asyncio.run``, a notebook, zarr-python's
sync thread) keeps it: a library does not replace the caller's loop.

Why uvloop: every obstore read completes on a worker thread through the loop's
``call_soon_threadsafe``, one or two per request. asyncio wakes its loop with a write to
a self-pipe per call; uvloop coalesces the wake-ups into one write per loop iteration
(an ``eventfd`` on Linux) and schedules in C. Single chunk reads over HTTP on loopback
run about 1.5x as fast (``docs/performance.md``).

``ASYNCSHARD_EVENT_LOOP`` chooses: ``auto`` (the default: uvloop if importable, else
asyncio's), ``uvloop`` (an error if it is not installed) or ``asyncio``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from asyncshard.errors import EventLoopError

T = TypeVar("T")

#: The environment variable that chooses the event loop.
ENV = "ASYNCSHARD_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def choice() -> str:
    """The loop ``ASYNCSHARD_EVENT_LOOP`` asks for (``auto`` when unset)."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise EventLoopError(
            f"{ENV}={os.environ[ENV]!r} names no event loop: use one of {', '.join(CHOICES)}"
        )
    return value


def loop_factory() -> LoopFactory:
    """What creates the loops of asyncshard's entry points (see the module)."""
    wanted = choice()
    if wanted == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise EventLoopError(
                f"{ENV}=uvloop but uvloop is not installed (pip install uvloop)"
            ) from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind."""
    return loop_factory()()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a loop of the chosen kind."""
    try:
        factory = loop_factory()
    except BaseException:
        coro.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
