#!/usr/bin/env python
"""Listing an array's chunk keys on S3 with round-trip latency: one paged listing
against asyncshard's ``walk_keys`` (folders listed several at a time) and ``list_keys``
(the first page and the walk at once), in one run.

SeaweedFS (the tests' real S3 server, ``weed mini``) holds three arrays' worth of empty
objects under one bucket: ``nested/c/i/j/k`` keys (the ``/`` separator, ``--shape``
chunks), the same number of ``flat/c.i.j.k`` keys (the ``.`` separator: one folder),
and a small array's ``small/c/i/j/k`` (``--small`` chunks, one page's worth).
A proxy in front of it (tests/servers/proxy.py) delays every answer by ``--latency``
seconds, the round trip to a cloud region that loopback does not have. Per round and
layout, each lister in turn, from one asyncshard ``CloudStore`` through the proxy:

* ``obstore list``: ``obstore.list`` of the prefix, every page collected (the peer: what
  zarr-python's ``ObjectStore`` and every obstore user get);
* ``list_prefix``: asyncshard's ``Store.list_prefix`` (the same paged listing);
* ``walk_keys``: ``asyncshard.walk.walk_keys``;
* ``list_keys``: ``asyncshard.walk.list_keys`` (what conversions, ``verify`` and
  ``CloudStore.erase_prefix`` list with).

Every lister's keys are checked against the keys written. Printed: medians of
``--rounds`` rounds (the order rotates) in seconds, requests sent (the proxy's log),
and each lister's time over ``walk_keys``'s. Run from the repository root::

    python benchmarks/bench_listing.py [--shape 16,32,32] [--small 4,4,4] [--latency 0.02]
                                       [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import obstore
from obstore.store import S3Store

from asyncshard import loops
from asyncshard.backends import open_store
from asyncshard.store import Store
from asyncshard.walk import list_keys, walk_keys
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server
from tests.servers.seaweedfs import start_seaweedfs

Lister = Callable[[Store, str], Awaitable[list[str]]]


def obstore_lister(server: S3Server, endpoint: str) -> Lister:
    """obstore's own paged listing, on a client of its own to ``endpoint``."""
    raw = S3Store(
        server.bucket,
        endpoint=endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region="us-east-1",
        client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )

    async def listed(_store: Store, prefix: str) -> list[str]:
        keys: list[str] = []
        async for page in obstore.list(raw, f"{BASE}/{prefix}"):
            keys.extend(o["path"][len(BASE) + 1 :] for o in page)
        return keys

    return listed


async def list_prefix(store: Store, prefix: str) -> list[str]:
    return [k async for k in store.list_prefix(prefix)]


BASE = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="16,32,32", help="chunks along each axis")
    parser.add_argument("--small", default="4,4,4", help="the small array's chunks")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per answer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    shape = [int(n) for n in args.shape.split(",")]
    args.small_shape = [int(n) for n in args.small.split(",")]
    server = start_seaweedfs()
    proxy = FaultProxy(server.endpoint, latency=args.latency).start()
    try:
        loops.run(run(server, proxy, shape, args))
    finally:
        proxy.stop()
        server.stop()


async def run(
    server: S3Server, proxy: FaultProxy, shape: list[int], args: argparse.Namespace
) -> None:
    coords = list(itertools.product(*map(range, shape)))
    layouts = {
        "nested": [f"nested/c/{i}/{j}/{k}" for i, j, k in coords],
        "flat": [f"flat/c.{i}.{j}.{k}" for i, j, k in coords],
        "small": [
            f"small/c/{i}/{j}/{k}" for i, j, k in itertools.product(*map(range, args.small_shape))
        ],
    }
    options = server.options()
    listers: dict[str, Lister] = {
        "obstore list": obstore_lister(server, proxy.url),
        "list_prefix": list_prefix,
        "walk_keys": walk_keys,
        "list_keys": list_keys,
    }
    async with open_store(f"s3://{server.bucket}/{BASE}", **options) as direct:
        started = time.perf_counter()
        for keys in layouts.values():
            await direct.set_many([(k, b"") for k in keys])
        written = sum(map(len, layouts.values()))
        print(f"wrote {written:,} objects in {time.perf_counter() - started:.1f} s")
    times: dict[tuple[str, str], list[float]] = {}
    requests: dict[tuple[str, str], int] = {}
    through_proxy = {**options, "endpoint": proxy.url}
    async with open_store(f"s3://{server.bucket}/{BASE}", **through_proxy) as store:
        names = list(listers)
        for n in range(args.rounds):
            order = names[n % len(names) :] + names[: n % len(names)]
            for layout, expected in layouts.items():
                for name in order:
                    proxy.reset()
                    started = time.perf_counter()
                    keys = await listers[name](store, layout + "/")
                    times.setdefault((layout, name), []).append(time.perf_counter() - started)
                    requests[(layout, name)] = len(proxy.log)
                    if sorted(keys) != sorted(expected):
                        raise AssertionError(f"{name} listed {len(keys)} keys, not {len(expected)}")
    load = os.getloadavg()
    print(
        f"\n{len(coords):,} keys per large layout, {len(layouts['small'])} in the small one, "
        f"{args.latency * 1000:.0f} ms per answer, "
        f"median of {args.rounds} rounds; load average {load[0]:.2f}"
    )
    print("| layout | lister | s | requests | time / walk_keys's |")
    print("|---|---|---|---|---|")
    for layout in layouts:
        ours = statistics.median(times[(layout, "walk_keys")])
        for name in listers:
            wall = statistics.median(times[(layout, name)])
            print(
                f"| {layout} | {name} | {wall:.3f} | {requests[(layout, name)]} | "
                f"{wall / ours:.2f}x |"
            )


if __name__ == "__main__":
    main()
