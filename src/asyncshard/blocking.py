"""Run a Store coroutine from synchronous code: the synchronous faces of the async API
(zarr-python's ``*_sync`` store methods, obspec's synchronous protocols).

The coroutines run on one background event loop (a daemon thread started on first use),
so a synchronous call works from any thread, including one whose own event loop is
running (zarr's sync-parity tests call ``get_sync`` from inside a coroutine). asyncshard's
stores are safe across loops: concurrency limits and single-flight loads are per loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from asyncshard import loops

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = loops.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="asyncshard-blocking", daemon=True
            )
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on the background loop and return its result."""
    try:
        loop = _background_loop()
    except BaseException:  # e.g. EventLoopError: the coroutine never runs
        coro.close()
        raise
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("a synchronous store call cannot run on the store's own sync loop")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()
