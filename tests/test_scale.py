"""Memory that does not grow with the dataset: listings and conversions.

Memory is measured with ``tracemalloc`` (Python allocations, numpy's included), as the
peak added by one call over what was allocated before it.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from asyncshard.backends import LocalStore


async def peak_added(call: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """``call()``'s result and the peak of Python memory it added, in bytes."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        result = await call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - before


def _touch_many(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        os.close(os.open(folder / f"c.{i}.{i % 7}", os.O_CREAT | os.O_WRONLY, 0o644))


async def test_local_listing_streams(tmp_path: Path) -> None:
    """A listing of 20,000 keys holds a batch of keys, not the listing (1.7 MB)."""
    _touch_many(tmp_path / "a", 20_000)
    _touch_many(tmp_path / "b" / "c", 10)
    store = LocalStore(tmp_path)

    async def count() -> int:
        return sum([1 async for _ in store.list_prefix("")])

    n, added = await peak_added(count)
    assert n == 20_010
    assert added < 600_000, added


async def test_local_listing_stopped_early_closes_its_folders(tmp_path: Path) -> None:
    _touch_many(tmp_path / "a" / "b", 3_000)
    store = LocalStore(tmp_path)
    fds = len(os.listdir("/proc/self/fd"))
    first = []
    async for key in store.list_prefix("a/"):
        first.append(key)
        if len(first) == 10:
            break
    for _ in range(3):  # the abandoned listing is closed by the loop's finalizer
        await asyncio.sleep(0.01)
    assert len(first) == 10 and all(k.startswith("a/b/c.") for k in first)
    assert len(os.listdir("/proc/self/fd")) == fds
