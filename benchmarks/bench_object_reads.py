#!/usr/bin/env python
"""Whole small objects read from S3 as a batch: asyncshard beside obstore and tensorstore.

What a conversion from a flat array reads (``get_many`` of every chunk object), and what
a reader of an unsharded array asks for one object at a time. SeaweedFS (the tests' real
S3 server, ``weed mini``) holds ``--objects`` objects of ``--size`` random bytes; per
round each reader reads all of them, 32 at a time (asyncshard's default bound), in this
process and on the event loop of ``--loop``:

* ``asyncshard get_many``: ``Store.get_many`` of every key;
* ``asyncshard get, 32``: ``Store.get`` of each key, all started at once;
* ``asyncshard get_many, UnshardedView``: the same through the view that presents
  sharded arrays unsharded (``ZarrStore``'s ``inner-chunks`` mode), which passes these
  keys (no dataset's chunks) through to the store;
* ``asyncshard get_many, from_obspec``: the same through an obstore ``S3Store`` wrapped
  as a Store (``from_obspec``: what a caller handing asyncshard an obspec client gets);
* ``obstore get_async + bytes_async``: the read that returns the object's metadata
  (two hand-offs from obstore's threads to the event loop);
* ``obstore get_range_async``: one hand-off (a range open to the end);
* ``tensorstore kvstore read``: ``ts.KvStore.read`` of each key on its ``s3`` driver,
  all awaited together (its own 32-request bound, ``s3_request_concurrency``).

Every reader's bytes are checked. Printed: medians of ``--rounds`` rounds (the order
rotates) of objects/s, CPU milliseconds per object (this process, every thread: the
server runs in its own), and asyncshard ``get_many``'s rate over each reader's. Run
from the repository root::

    python benchmarks/bench_object_reads.py [--objects 4096] [--size 32768] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import obstore
from obstore.store import S3Store

from benchmarks.common import add_loop_argument, cpu_now, use_loop
from tests.servers.s3 import S3Server
from tests.servers.seaweedfs import start_seaweedfs

BASE = "bench"
IN_FLIGHT = 32
Reader = Callable[[Sequence[str]], Awaitable[list[Any]]]


def bounded(read: Callable[[str], Awaitable[Any]]) -> Reader:
    """Each key through ``read``, ``IN_FLIGHT`` at a time."""

    async def run(keys: Sequence[str]) -> list[Any]:
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(key: str) -> Any:
            async with sem:
                return await read(key)

        return await asyncio.gather(*(one(k) for k in keys))

    return run


def readers(server: S3Server) -> dict[str, Reader]:
    import tensorstore as ts

    from asyncshard import open_store
    from asyncshard.obspec import from_obspec
    from asyncshard.views import UnshardedView

    store = open_store(f"s3://{server.bucket}/{BASE}", **server.options())
    view = UnshardedView(store)
    raw = S3Store(
        server.bucket,
        prefix=BASE,
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        client_options={"allow_http": True},
    )
    os.environ.update(
        AWS_ACCESS_KEY_ID=server.access_key,
        AWS_SECRET_ACCESS_KEY=server.secret_key,
        AWS_REGION=server.region,
    )
    kv = ts.KvStore.open(
        {
            "driver": "s3",
            "bucket": server.bucket,
            "path": BASE + "/",
            "endpoint": server.endpoint,
            "aws_region": server.region,
            "aws_credentials": {"type": "environment"},
        }
    ).result()

    async def two_calls(key: str) -> Any:
        result = await obstore.get_async(raw, key)
        return await result.bytes_async()

    async def one_call(key: str) -> Any:
        return await obstore.get_range_async(raw, key, start=0, end=1 << 62)

    async def ts_read(keys: Sequence[str]) -> list[Any]:
        results = await asyncio.gather(*(kv.read(k) for k in keys))
        return [r.value for r in results]

    async def get_each(keys: Sequence[str]) -> list[Any]:
        return await asyncio.gather(*(store.get(k) for k in keys))

    return {
        "asyncshard get_many": store.get_many,
        "asyncshard get, 32": get_each,
        "asyncshard get_many, UnshardedView": view.get_many,
        "asyncshard get_many, from_obspec": from_obspec(raw).get_many,
        "obstore get_async + bytes_async": bounded(two_calls),
        "obstore get_range_async": bounded(one_call),
        "tensorstore kvstore read": ts_read,
    }


async def run(server: S3Server, args: argparse.Namespace) -> None:
    from asyncshard import open_store

    keys = [f"c/{i // 256}/{i // 16 % 16}/{i % 16}" for i in range(args.objects)]
    blob = os.urandom(args.size + len(keys))
    values = {k: blob[i : i + args.size] for i, k in enumerate(keys)}
    digest = hashlib.sha256(b"".join(values[k] for k in keys)).hexdigest()
    async with open_store(f"s3://{server.bucket}/{BASE}", **server.options()) as store:
        await store.set_many(list(values.items()))
    every = readers(server)
    names = list(every)
    rates: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for n in range(args.rounds + 1):  # round 0 warms connections and is not counted
        for name in names[n % len(names) :] + names[: n % len(names)]:
            cpu, started = cpu_now(), time.perf_counter()
            got = await every[name](keys)
            wall, cpu = time.perf_counter() - started, cpu_now() - cpu
            if hashlib.sha256(b"".join(bytes(g) for g in got)).hexdigest() != digest:
                raise AssertionError(f"{name} read other bytes")
            if n:
                rates[name].append(len(keys) / wall)
                cpus[name].append(cpu * 1000 / len(keys))
    load = os.getloadavg()
    ours = statistics.median(rates["asyncshard get_many"])
    print(
        f"\n{len(keys):,} objects of {args.size:,} bytes on SeaweedFS, {IN_FLIGHT} in flight, "
        f"loop {args.loop}, median of {args.rounds} rounds; load average {load[0]:.2f}"
    )
    print("| reader | objects/s | CPU-ms/object | get_many / reader |")
    print("|---|---|---|---|")
    for name in names:
        rate = statistics.median(rates[name])
        cpu_ms = statistics.median(cpus[name])
        print(f"| {name} | {rate:,.0f} | {cpu_ms:.3f} | {ours / rate:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=4096)
    parser.add_argument("--size", type=int, default=32768, help="bytes per object")
    parser.add_argument("--rounds", type=int, default=5)
    add_loop_argument(parser, "the event loop of every reader")
    args = parser.parse_args()
    use_loop(args.loop)
    from asyncshard import loops

    server = start_seaweedfs()
    try:
        loops.run(run(server, args))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
