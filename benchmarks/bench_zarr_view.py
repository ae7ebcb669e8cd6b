#!/usr/bin/env python
"""Random inner-chunk reads of a sharded array: the view, zarr-python, tensorstore.

One sharded Zarr array (uint8, ``--shape``, shards of ``--shard``, inner chunks of
``--chunk``) is served by **nginx** on loopback (Debian ``nginx-light``: a throwaway
config with its own prefix, ``daemon off``, one worker, an access log to count requests)
and by **moto S3** behind a counting proxy (``tests/servers/proxy.py``), both in a
child process. Three readers
read the same random inner chunks, one chunk per read, ``--concurrency`` reads in flight:

* **view**: zarr-python's async API over ``ZarrStore(url, mode="inner-chunks")``
  (asyncshard's HTTP or S3 store): the array looks unsharded; the shard-index cache and
  the batching of concurrent reads serve the chunks;
* **zarr-python**: zarr-python's own sharding codec over ``zarr.storage.ObjectStore``
  (obstore ``HTTPStore`` / ``S3Store``): no index cache, 2 requests per chunk;
* **tensorstore**: its ``zarr3`` driver over its ``http`` / ``s3`` kvstore, with a
  ``cache_pool`` and ``recheck_cached_data: "open"`` (cached shard indexes are used
  without revalidation; by default it revalidates them).

On loopback the rate is bound by CPU per chunk (zarr-python's own per-chunk work is
the same for its two readers); ``--latency-ms`` adds latency to every moto request (a
remote link, modelled by the proxy), where requests per chunk bound the rate instead.

**cold**: a fresh reader (nothing cached; opening the array is not counted); **warm**:
the same reader, another sample of as many chunks (indexes cached, chunk data not).
Readers take turns in every round (the order rotates); medians over ``--rounds``.
Printed: chunks/s, requests per chunk (seen by the server), CPU ms per chunk in this
process (all threads), and the view's rate over each reader's. The load average of the
machine is printed with the numbers: other work on it moves them. Run from the
repository root::

    python benchmarks/bench_zarr_view.py [--rounds 5] [--sample 300] [--concurrency 32]
    python benchmarks/bench_zarr_view.py --backends moto --latency-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import obstore.store
import tensorstore as ts
import zarr
import zarr.api.asynchronous
import zarr.storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers

from asyncshard.zarr_python import ZarrStore
from benchmarks.common import aws_profile, bounded
from benchmarks.nginx import Nginx as NginxServer
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server, start_moto

READERS = ("view", "zarr-python", "tensorstore")
Coords = tuple[int, ...]
# -- servers ------------------------------------------------------------------------------


@contextmanager
def nginx(root: Path) -> Iterator[tuple[str, Callable[[], int]]]:
    """nginx serving ``root``: its base URL and a function counting the requests so far."""
    with NginxServer(root) as server:
        yield server.url, server.requests


def moto_child(latency: float, conn: Any) -> None:
    """moto and the counting proxy in their own process (so that their Python does not
    compete with the readers' for this process's GIL); answers ``count`` until ``stop``."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = start_moto()
    proxy = FaultProxy(server.endpoint, latency=latency).start()
    fields = ("endpoint", "bucket", "access_key", "secret_key", "region")
    conn.send(({f: getattr(server, f) for f in fields}, proxy.url))
    try:
        while conn.recv() == "count":
            conn.send(len(proxy.log))
    finally:
        proxy.stop()
        server.stop()


@contextmanager
def moto(latency: float) -> Iterator[tuple[S3Server, str, Callable[[], int]]]:
    """A moto S3 server behind a counting proxy in a child process: the server (for
    signing), the proxy's URL and a function counting the requests so far."""
    ours, theirs = mp.Pipe()
    child = mp.get_context("spawn").Process(target=moto_child, args=(latency, theirs))
    child.start()
    try:
        fields, proxy_url = ours.recv()

        def count() -> int:
            ours.send("count")
            n: int = ours.recv()
            return n

        yield S3Server(name="moto", **fields), proxy_url, count
    finally:
        ours.send("stop")
        child.join(20)


# -- the array ----------------------------------------------------------------------------


def write_array(store: Any, shape: Coords, shard: Coords, chunk: Coords) -> None:
    data = np.random.default_rng(0).integers(0, 255, shape, dtype=np.uint8)
    arr = zarr.create_array(
        store,
        name="arr",
        shape=shape,
        chunks=chunk,
        shards=shard,
        dtype="uint8",
        compressors=None,
        fill_value=0,
    )
    arr[...] = data


def window(coords: Coords, chunk: Coords) -> tuple[slice, ...]:
    return tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, chunk, strict=True))


# -- readers: each returns an async function reading a list of chunks --------------------

Read = Callable[[list[Coords]], Awaitable[None]]


async def zarr_reader(store: Any, chunk: Coords, limit: int) -> Read:
    arr = await zarr.api.asynchronous.open_array(store=store, path="arr", mode="r")

    async def read(chunks: list[Coords]) -> None:
        jobs = [lambda c=c: arr.getitem(window(c, chunk)) for c in chunks]
        await bounded(limit, jobs)  # type: ignore[arg-type]

    return read


async def ts_reader(kvstore: dict[str, Any], chunk: Coords, limit: int) -> Read:
    context = ts.Context({"cache_pool": {"total_bytes_limit": 256 << 20}})
    spec = {"driver": "zarr3", "kvstore": kvstore, "recheck_cached_data": "open"}
    arr = await ts.open(spec, context=context, read=True)

    async def read(chunks: list[Coords]) -> None:
        jobs = [lambda c=c: arr[window(c, chunk)].read() for c in chunks]
        await bounded(limit, jobs)  # type: ignore[arg-type]

    return read


class Backend:
    """Where the array is served and how each reader opens it."""

    name: str

    def count(self) -> int:
        raise NotImplementedError

    async def open(self, reader: str, chunk: Coords, limit: int) -> Read:
        raise NotImplementedError


class Nginx(Backend):
    name = "nginx"

    def __init__(self, base: str, count: Callable[[], int]) -> None:
        self.base, self._count = base, count

    def count(self) -> int:
        return self._count()

    async def open(self, reader: str, chunk: Coords, limit: int) -> Read:
        if reader == "view":
            return await zarr_reader(ZarrStore(self.base + "/", mode="inner-chunks"), chunk, limit)
        if reader == "zarr-python":
            http = obstore.store.HTTPStore.from_url(self.base, client_options={"allow_http": True})
            return await zarr_reader(zarr.storage.ObjectStore(http, read_only=True), chunk, limit)
        kv = {"driver": "http", "base_url": self.base + "/arr/"}
        return await ts_reader(kv, chunk, limit)


class Moto(Backend):
    name = "moto S3"

    def __init__(
        self, server: S3Server, url: str, count: Callable[[], int], prefix: str, creds: Path
    ) -> None:
        self.server, self.url, self._count = server, url, count
        self.prefix, self.creds = prefix, creds

    def count(self) -> int:
        return self._count()

    async def open(self, reader: str, chunk: Coords, limit: int) -> Read:
        s = self.server
        if reader == "view":
            url = f"s3://{s.bucket}/{self.prefix}"
            view = ZarrStore(url, mode="inner-chunks", **s.options(endpoint=self.url))
            return await zarr_reader(view, chunk, limit)
        if reader == "zarr-python":
            s3 = obstore.store.S3Store(
                s.bucket,
                prefix=self.prefix,
                endpoint=self.url,
                region=s.region,
                access_key_id=s.access_key,
                secret_access_key=s.secret_key,
                client_options={"allow_http": True},
            )
            return await zarr_reader(zarr.storage.ObjectStore(s3, read_only=True), chunk, limit)
        kv = {
            "driver": "s3",
            "bucket": s.bucket,
            "endpoint": self.url,
            "aws_region": s.region,
            "path": f"{self.prefix}/arr/",
            "aws_credentials": aws_profile(self.creds, s.access_key, s.secret_key, s.region),
        }
        return await ts_reader(kv, chunk, limit)


# -- measuring ----------------------------------------------------------------------------


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def phase(backend: Backend, read: Read, chunks: list[Coords]) -> tuple[float, float, float]:
    """(chunks/s, requests per chunk, CPU ms per chunk) of reading ``chunks``."""
    before, cpu = backend.count(), cpu_seconds()
    start = time.perf_counter()
    await read(chunks)
    elapsed = time.perf_counter() - start
    await asyncio.sleep(0.05)  # let the server log its last lines
    n = len(chunks)
    return n / elapsed, (backend.count() - before) / n, (cpu_seconds() - cpu) * 1000 / n


async def run_backend(
    backend: Backend, args: argparse.Namespace, grid: Coords
) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    chunk = tuple(args.chunk)
    cells = [tuple(int(i) for i in c) for c in np.ndindex(*grid)]
    rng = random.Random(args.seed)
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for round_ in range(args.rounds):
        picked = rng.sample(cells, 2 * args.sample)
        cold, warm = picked[: args.sample], picked[args.sample :]
        order = READERS[round_ % 3 :] + READERS[: round_ % 3]
        for reader in order:
            read = await backend.open(reader, chunk, args.concurrency)
            for name, sample in (("cold", cold), ("warm", warm)):
                results.setdefault((reader, name), []).append(await phase(backend, read, sample))
    return results


def report(backend: str, results: dict[tuple[str, str], list[tuple[float, float, float]]]) -> None:
    print(f"\n{backend}: load average {os.getloadavg()[0]:.1f} (1 min) after the run")
    print(
        f"{'phase':<5} {'reader':<12} {'chunks/s':>9} {'req/chunk':>10} {'CPU ms/chunk':>13} "
        f"{'view/x':>7}"
    )
    for name in ("cold", "warm"):
        medians = {
            reader: tuple(statistics.median(r[i] for r in results[reader, name]) for i in range(3))
            for reader in READERS
        }
        for reader in READERS:
            rate, requests, cpu = medians[reader]
            ratio = medians["view"][0] / rate
            print(
                f"{name:<5} {reader:<12} {rate:>9.0f} {requests:>10.2f} {cpu:>13.2f} {ratio:>6.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 512, 128])
    parser.add_argument("--shard", type=int, nargs=3, default=[128, 128, 128])
    parser.add_argument("--chunk", type=int, nargs=3, default=[32, 32, 32])
    parser.add_argument("--sample", type=int, default=300, help="chunks per phase")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32, help="reads in flight")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", nargs="+", default=["nginx", "moto"])
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="added to every moto request by the proxy (a remote link)",
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)
    shape, shard, chunk = tuple(args.shape), tuple(args.shard), tuple(args.chunk)
    grid = tuple(s // c for s, c in zip(shape, chunk, strict=True))
    if 2 * args.sample > int(np.prod(grid)):
        raise SystemExit(f"--sample {args.sample}: the array has only {np.prod(grid)} chunks")
    print(
        f"random {chunk} uint8 inner chunks of a {shape} array, shards {shard} (uncompressed),"
        f" {args.concurrency} reads in flight, {args.sample} chunks per phase, "
        f"median of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f} before"
    )
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # nginx's workers run as another user
        root = Path(tmp) / "data"
        write_array(zarr.storage.LocalStore(root), shape, shard, chunk)
        if "nginx" in args.backends:
            with nginx(root) as (base, count):
                report("nginx", asyncio.run(run_backend(Nginx(base, count), args, grid)))
        if "moto" in args.backends:
            with moto(args.latency_ms / 1000) as (server, proxy_url, count):
                creds = Path(tmp)
                prefix = "bench"
                setup = ZarrStore(f"s3://{server.bucket}/{prefix}", **server.options())
                write_array(setup, shape, shard, chunk)
                backend = Moto(server, proxy_url, count, prefix, creds)
                label = f"moto S3 (+{args.latency_ms:g} ms per request)"
                report(label, asyncio.run(run_backend(backend, args, grid)))


if __name__ == "__main__":
    main()
