"""Measure what coalescing costs and saves, to choose CloudStore's max_gap/max_request.

Run: ``python -m tests.cloud.measure_coalescing`` (about two minutes). Prints the markdown
tables recorded in docs/cloud.md. Not collected by pytest (no ``test_`` prefix).

Servers: moto, rclone and a static HTTP server on loopback, and the static server behind
the test proxy shaped like a remote object store (20 ms first-byte latency per request,
100 MiB/s per connection), because on loopback bytes are nearly free and only the
per-request cost shows. moto and rclone spend time proportional to the object's size
on every request (moto copies, rclone hashes the file for its ETag), so their objects
are kept small.

1. Two 16 KiB ranges a gap apart: two requests (concurrently, and one after the other,
   as when every concurrency slot is busy) against one merged request over the gap.
2. A 32 MiB contiguous run of 128 KiB chunks: one request per ``max_request`` bytes.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from asyncshard.backends import open_store
from asyncshard.ranges import Range
from asyncshard.store import Store
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.http_static import StaticServer
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import start_moto, start_rclone

KiB, MiB = 1024, 1024 * 1024
PIECE = 16 * KiB
GAPS = [0, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB]
REQUEST_CAPS = [1 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB]
LATENCY, BANDWIDTH = 0.020, 100 * MiB  # per request / per connection, "remote" link


async def median_ms(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    await fn()  # warm the connection pool
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def gap_table(name: str, store: Store, key: str, repeat: int) -> list[str]:
    rows = []
    for gap in GAPS:
        a, b = Range(0, PIECE), Range(PIECE + gap, 2 * PIECE + gap)

        async def split(a: Range = a, b: Range = b) -> object:
            store.max_gap = 0
            return await store.get_partial_values([(key, a), (key, b)])

        async def sequential(a: Range = a, b: Range = b) -> object:
            return [await store.get(key, a), await store.get(key, b)]

        async def merged(a: Range = a, b: Range = b, gap: int = gap) -> object:
            store.max_gap = gap
            return await store.get_partial_values([(key, a), (key, b)])

        t_split = await median_ms(split, repeat)
        t_seq = await median_ms(sequential, repeat)
        t_merged = await median_ms(merged, repeat)
        rows.append(f"| {name} | {gap // KiB} KiB | {t_split:.1f} | {t_seq:.1f} | {t_merged:.1f} |")
    return rows


async def cap_table(name: str, store: Store, key: str, repeat: int) -> list[str]:
    rows = []
    chunks = [Range(i * 128 * KiB, (i + 1) * 128 * KiB) for i in range(256)]  # 32 MiB
    for cap in REQUEST_CAPS:

        async def run(cap: int = cap) -> object:
            store.max_gap, store.max_request = 0, cap
            return await store.get_partial_values([(key, r) for r in chunks])

        t = await median_ms(run, repeat)
        rows.append(f"| {name} | {cap // MiB} MiB | {32 * MiB // cap} | {t:.0f} |")
    return rows


async def main() -> None:
    moto, rclone = start_moto(), start_rclone()
    fixed = FaultProxy(rclone.endpoint, fix_ranged_200=True).start()
    web = StaticServer(Path(tempfile.mkdtemp(prefix="asyncshard-measure-"))).start()
    remote = FaultProxy(web.url, latency=LATENCY, bandwidth=BANDWIDTH).start()
    small = bytes(i % 251 for i in range(5 * MiB))
    big = bytes(i % 251 for i in range(33 * MiB))
    (web.root / "small").write_bytes(small)
    (web.root / "big").write_bytes(big)
    try:
        moto_store = s3_store_on(moto, unique_prefix())
        rclone_store = s3_store_on(
            rclone, unique_prefix(), endpoint=fixed.url, conditional_writes=False
        )
        for s3 in (moto_store, rclone_store):
            await s3.set("small", small)
            await s3.set("big", big)
        http_store = open_store(web.url)
        remote_store = open_store(remote.url)
        gap_rows, cap_rows = [], []
        gap_rows += await gap_table("moto", moto_store, "small", 15)
        gap_rows += await gap_table("rclone", rclone_store, "small", 15)
        gap_rows += await gap_table("static HTTP", http_store, "small", 25)
        gap_rows += await gap_table("static HTTP + 20 ms, 100 MiB/s", remote_store, "small", 9)
        cap_rows += await cap_table("moto", moto_store, "big", 5)
        cap_rows += await cap_table("rclone", rclone_store, "big", 5)
        cap_rows += await cap_table("static HTTP", http_store, "big", 9)
        cap_rows += await cap_table("static HTTP + 20 ms, 100 MiB/s", remote_store, "big", 5)
        print(
            "| server | gap | 2 requests, concurrent (ms) | 2 requests, one after the other "
            "(ms) | 1 merged request (ms) |"
        )
        print("|---|---|---|---|---|")
        print("\n".join(gap_rows))
        print()
        print("| server | max_request | requests | 32 MiB in 128 KiB chunks (ms) |")
        print("|---|---|---|---|")
        print("\n".join(cap_rows))
    finally:
        remote.stop()
        web.stop()
        shutil.rmtree(web.root, ignore_errors=True)
        fixed.stop()
        rclone.stop()
        moto.stop()


if __name__ == "__main__":
    asyncio.run(main())
