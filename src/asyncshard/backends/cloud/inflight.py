"""Keep obstore's worker threads out of a finalizing interpreter.

obstore runs each request on a tokio worker thread and completes its asyncio future from
that thread (pyo3-async-runtimes): it takes the GIL and calls the loop's
``call_soon_threadsafe``, which queues the result and then writes a byte to the loop's
self-pipe with the GIL released. The awaiting coroutine can resume, and the whole
program can end, before that call has taken the GIL back. If the interpreter is
finalizing by then, CPython (before 3.14) ends the thread with ``pthread_exit``, whose
unwinding cannot cross the Rust frames: the process aborts (SIGABRT, exit status 134)
after the program itself succeeded. A core dump of ``asyncshard cat s3://...`` shows
exactly that stack (``take_gil`` < ``sock_send`` < ``call_soon_threadsafe`` <
``pyo3_async_runtimes::generic::set_result``); pyo3-async-runtimes issue #40 asks for a
shutdown hook that does not exist yet.

Two measures, in :class:`InFlight` and :func:`drain`:

* every obstore call of a store is a tracked future, shielded from the caller's
  cancellation (a cancelled Rust future would still complete later, from a worker
  thread, at a time nobody waits for), so ``close()`` can wait for all of them;
* after that, :func:`drain` waits until no other thread is inside a
  ``call_soon_threadsafe`` it entered from outside Python (the tail of a completion),
  releasing the GIL meanwhile. An ``atexit`` hook does the same for programs that never
  close their stores; it runs before the interpreter starts finalizing.

On uvloop (:mod:`asyncshard.loops`) ``call_soon_threadsafe`` is compiled and keeps the
GIL through its wake-up write (libuv's ``uv_async_send``), so the worker never waits to
take it back and :func:`drain` finds nothing to wait for. :class:`InFlight` matters on
both loops: a completion's first step, taking the GIL, must not fall into finalization
either.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

#: How long :func:`drain` waits at most (a completion's tail takes microseconds).
DRAIN_TIMEOUT = 2.0
_POLL = 0.001


class InFlight:
    """The obstore calls of one store that have not completed yet."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._pending)

    async def run(self, call: Awaitable[T]) -> T:
        """Await an obstore call; cancelling the caller does not cancel the call.

        Like ``asyncio.shield``, with one done-callback instead of two (this is on every
        request's path).
        """
        inner = asyncio.ensure_future(call)
        outer: asyncio.Future[T] = inner.get_loop().create_future()
        pending = self._pending
        pending.add(inner)

        def done(inner: asyncio.Future[T]) -> None:
            pending.discard(inner)
            if outer.done():  # the caller gave up; retrieve the error so it is not logged
                if not inner.cancelled():
                    inner.exception()
            elif inner.cancelled():
                outer.cancel()
            elif (exc := inner.exception()) is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(inner.result())

        inner.add_done_callback(done)
        return await outer

    async def drain(self) -> None:
        """Wait for every call made on the running loop, then :func:`drain`."""
        loop = asyncio.get_running_loop()
        mine = [f for f in list(self._pending) if f.get_loop() is loop]
        if mine:
            await asyncio.wait(mine)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while _completing() and time.monotonic() < deadline:
            await asyncio.sleep(_POLL)


def _completing() -> bool:
    """Whether another thread runs a ``call_soon_threadsafe`` it entered from native code.

    Such a thread is a worker completing a future: its outermost Python frame is that
    call. Threads started by Python have ``threading``'s bootstrap (or their own target)
    there instead.
    """
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        while frame.f_back is not None:
            frame = frame.f_back
        if frame.f_code.co_name == "call_soon_threadsafe":
            return True
    return False


def drain(timeout: float = DRAIN_TIMEOUT) -> None:
    """Block (releasing the GIL) until no worker thread is completing a future."""
    deadline = time.monotonic() + timeout
    while _completing() and time.monotonic() < deadline:
        time.sleep(_POLL)


atexit.register(drain)
