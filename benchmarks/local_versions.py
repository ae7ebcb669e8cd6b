"""Cost of LocalStore version tokens: µs per write, per warm small get and per head.

Run: ``python benchmarks/local_versions.py [FOLDER]`` (a temporary folder by default).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from asyncshard.backends import LocalStore

N = 2000


async def per_call(fn: Callable[[], Awaitable[object]], n: int = N) -> float:
    await fn()
    start = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - start) / n * 1e6


async def main(folder: str) -> None:
    store = LocalStore(folder, durable=False)
    await store.set("a/b", b"x" * 100)
    write = await per_call(lambda: store.set("a/b", b"x" * 100), N // 4)
    get = await per_call(lambda: store.get("a/b"))
    head = await per_call(lambda: store.head("a/b"))
    print(f"set {write:.1f} µs  get {get:.1f} µs  head {head:.1f} µs")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
