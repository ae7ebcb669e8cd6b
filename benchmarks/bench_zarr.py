"""Random inner-chunk reads from a sharded Zarr array over loopback HTTP.

asyncshard, zarr-python and tensorstore read the same random inner chunks from the same
static server (its own process) in one run; the server counts requests. Printed per
client: chunks/s and requests per chunk, cold (fresh client) and warm (same client, same
chunks again), and each rate as a ratio to asyncshard's.

    python benchmarks/bench_zarr.py [--chunks 300] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import obstore.store
import tensorstore as ts
import zarr
import zarr.api.asynchronous
import zarr.storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for benchmarks.common

from asyncshard.backends import open_store
from asyncshard.cache import IndexCache
from asyncshard.sharding.zarr import ZarrShardedStore
from benchmarks.common import bounded

SHAPE, SHARD, CHUNK = (256, 256, 128), (128, 128, 128), (32, 32, 32)


def serve(root: str, port_queue: Any) -> None:
    """A static file server with Range support that counts requests (child process)."""
    from aiohttp import web

    count = 0

    @web.middleware
    async def counting(request: web.Request, handler: Any) -> web.StreamResponse:
        nonlocal count
        if request.path == "/__requests":
            return web.Response(text=str(count))
        count += 1
        response: web.StreamResponse = await handler(request)
        return response

    async def main() -> None:
        app = web.Application(middlewares=[counting])
        app.router.add_static("/", root)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_queue.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def make_array(root: Path) -> None:
    data = np.random.default_rng(0).integers(0, 255, SHAPE, dtype=np.uint8)
    arr = zarr.create_array(
        store=zarr.storage.LocalStore(root), name="arr", shape=SHAPE, chunks=CHUNK,
        shards=SHARD, dtype="uint8", compressors=None, fill_value=0,
    )
    arr[...] = data


async def server_requests(base: str) -> int:
    store = open_store(base + "/")
    raw = await store.get("__requests")
    await store.close()
    return int(bytes(raw or b"0"))


def picks(n: int) -> list[tuple[int, ...]]:
    grid = [s // c for s, c in zip(SHAPE, CHUNK, strict=True)]
    rng = random.Random(1)
    return [tuple(rng.randrange(g) for g in grid) for _ in range(n)]


def window(coords: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, CHUNK, strict=True))


async def asyncshard_client(base: str, chunks: list[tuple[int, ...]], limit: int) -> Any:
    store = await ZarrShardedStore.open(open_store(base), "arr", cache=IndexCache())
    keys = [store.layout.chunk_key(c) for c in chunks]

    async def read() -> None:
        await bounded(limit, [lambda k=k: store.get(k) for k in keys])  # type: ignore[misc]

    return read


async def zarr_client(base: str, chunks: list[tuple[int, ...]], limit: int) -> Any:
    http = obstore.store.HTTPStore.from_url(base, client_options={"allow_http": True})
    zstore = zarr.storage.ObjectStore(http, read_only=True)
    arr = await zarr.api.asynchronous.open_array(store=zstore, path="arr", mode="r")

    async def read() -> None:
        await bounded(limit, [lambda c=c: arr.getitem(window(c)) for c in chunks])  # type: ignore[misc]

    return read


async def ts_client(base: str, chunks: list[tuple[int, ...]], cache: bool) -> Any:
    context = ts.Context({"cache_pool": {"total_bytes_limit": 256 << 20}} if cache else {})
    spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": base + "/arr/"}}
    arr = await ts.open(spec, context=context, read=True)

    async def read() -> None:
        await asyncio.gather(*(arr[window(c)].read() for c in chunks))

    return read


async def measure(base: str, label: str, read: Callable[[], Awaitable[None]], n: int) -> list[Any]:
    rows = []
    for phase in ("cold", "warm"):
        before = await server_requests(base)
        start = time.perf_counter()
        await read()
        elapsed = time.perf_counter() - start
        requests = await server_requests(base) - before
        rows.append((label, phase, n / elapsed, requests / n))
    return rows


async def run(base: str, n: int, limit: int) -> None:
    chunks = picks(n)
    clients: list[tuple[str, Any]] = [
        ("asyncshard", await asyncshard_client(base, chunks, limit)),
        ("zarr-python", await zarr_client(base, chunks, limit)),
        ("tensorstore", await ts_client(base, chunks, cache=False)),
        ("tensorstore+cache", await ts_client(base, chunks, cache=True)),
    ]
    rows = []
    for label, read in clients:
        rows += await measure(base, label, read, n)
    ours = {phase: rate for label, phase, rate, _ in rows if label == "asyncshard"}
    print(f"{n} random {CHUNK} uint8 inner chunks of a {SHAPE} array, shards {SHARD}, "
          f"over loopback HTTP (concurrency {limit})")
    print(f"{'client':<18} {'phase':<5} {'chunks/s':>10} {'req/chunk':>10} {'asyncshard/x':>13}")
    for label, phase, rate, per_chunk in rows:
        print(f"{label:<18} {phase:<5} {rate:>10.0f} {per_chunk:>10.2f} "
              f"{ours[phase] / rate:>12.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        make_array(Path(tmp))
        ports: Any = mp.Queue()
        server = mp.Process(target=serve, args=(tmp, ports), daemon=True)
        server.start()
        try:
            base = f"http://127.0.0.1:{ports.get(timeout=20)}"
            asyncio.run(run(base, args.chunks, args.concurrency))
        finally:
            server.terminate()


if __name__ == "__main__":
    main()
