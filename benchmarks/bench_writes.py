#!/usr/bin/env python
"""Writing a sharded Zarr array block by block: asyncshard's view beside its peers.

What a dask job does when it stores an array into a sharded Zarr array: blocks of
``--block`` elements per axis (aligned to the inner chunks, not to the shards), written
by ``--threads`` threads at once, each with zarr-python's synchronous API
(``array[block] = values``). The array is ``--size``^3 uint8 of random values, inner
chunks of ``--chunk``^3, shards of ``--shard``^3, uncompressed, on local files (``fsync``
on) or on SeaweedFS (the tests' S3 server, ``--backend s3``). Writers, each into a fresh
array, taking turns every round:

* ``asyncshard view``: zarr-python through ``ZarrStore(url, mode="inner-chunks")``, with
  zarr's default ``async.concurrency`` (10): zarr-python hands over at most that many
  chunk writes per operation, so a shard is read, merged and written once per group of
  writes the view sees together;
* ``asyncshard view, concurrency = chunks per shard``: the same with
  ``async.concurrency`` raised to the chunks per shard (what the README advises);
* ``zarr-python sharding codec``: zarr-python's own sharding over its own store
  (``LocalStore`` / ``ObjectStore``): one read-modify-write of the shard per block, not
  safe against concurrent writers (the values it lost are counted);
* ``tensorstore``: its ``zarr3`` driver, ``write(block).result()`` per block, no cache.

With ``--latency`` or ``--bandwidth`` (``--backend s3``), every writer talks to SeaweedFS
through a proxy (``tests/servers/proxy.py``) that delays each answer and caps the bytes
per second of each response body: a remote bucket, where reading a shard back costs.
Every array is read back with zarr-python and compared. Printed: medians of
``--rounds`` of wall seconds, MB/s, CPU seconds (this process, every thread), the PUTs
(shard writes) and GETs asyncshard sent, values lost, and the default view's speed over
each writer's. Run from the repository root::

    python benchmarks/bench_writes.py [--threads 4] [--rounds 3] [--backend s3]
    python benchmarks/bench_writes.py --backend s3 --latency 0.02 --bandwidth 1e8
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zarr

from benchmarks.common import cpu_now, sharding_codec
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server
from tests.servers.seaweedfs import start_seaweedfs

Block = tuple[slice, ...]
MB = 1e6


class Place:
    """Where the arrays go: a folder, or a prefix of the SeaweedFS bucket."""

    def __init__(self, backend: str, latency: float, bandwidth: float | None) -> None:
        self.server: S3Server | None = start_seaweedfs() if backend == "s3" else None
        self.proxy: FaultProxy | None = None
        if self.server is not None and (latency or bandwidth):
            self.proxy = FaultProxy(self.server.endpoint, latency=latency, bandwidth=bandwidth)
            self.proxy.start()
        self.folder = Path(tempfile.mkdtemp(prefix="bench-writes-"))
        if self.server is not None:
            os.environ.update(
                AWS_ACCESS_KEY_ID=self.server.access_key,
                AWS_SECRET_ACCESS_KEY=self.server.secret_key,
                AWS_REGION=self.server.region,
            )

    def url(self, name: str) -> str:
        if self.server is None:
            return str(self.folder / name)
        return f"s3://{self.server.bucket}/bench-writes/{name}"

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return self.server.endpoint if self.proxy is None else self.proxy.url

    def asyncshard_options(self) -> dict[str, Any]:
        return {} if self.server is None else self.server.options(endpoint=self.endpoint)

    def zarr_store(self, name: str) -> Any:
        """zarr-python's own store of array ``name``."""
        if self.server is None:
            return zarr.storage.LocalStore(self.url(name))
        from obstore.store import S3Store

        s = self.server
        raw = S3Store(
            s.bucket,
            prefix=f"bench-writes/{name}",
            endpoint=self.endpoint,
            access_key_id=s.access_key,
            secret_access_key=s.secret_key,
            region=s.region,
            client_options={"allow_http": True},
        )
        return zarr.storage.ObjectStore(raw)

    def ts_kvstore(self, name: str) -> dict[str, Any]:
        if self.server is None:
            return {"driver": "file", "path": self.url(name)}
        s = self.server
        return {
            "driver": "s3",
            "bucket": s.bucket,
            "path": f"bench-writes/{name}/",
            "endpoint": self.endpoint,
            "aws_region": s.region,
            "aws_credentials": {"type": "environment"},
        }

    def clear(self, name: str) -> None:
        if self.server is None:
            shutil.rmtree(self.url(name), ignore_errors=True)
        else:
            from asyncshard import loops, open_store

            async def erase() -> None:
                async with open_store(self.url(name), **self.asyncshard_options()) as store:
                    await store.erase_prefix("")

            loops.run(erase())

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None:
            self.server.stop()


def create(place: Place, name: str, args: argparse.Namespace) -> None:
    """A fresh sharded array ``name`` (zarr-python writes its metadata)."""
    place.clear(name)
    zarr.create_array(
        place.zarr_store(name),
        shape=(args.size,) * 3,
        chunks=(args.chunk,) * 3,
        shards=(args.shard,) * 3,
        dtype="uint8",
        compressors=None,
        fill_value=0,
    )


def writers(place: Place, args: argparse.Namespace) -> dict[str, Callable[[str], Any]]:
    """Each writer: array name -> (an object whose ``[block] =`` writes, stats or None)."""
    import tensorstore as ts

    from asyncshard.zarr_python import ZarrStore

    def view(name: str) -> Any:
        store = ZarrStore(place.url(name), mode="inner-chunks", **place.asyncshard_options())
        return zarr.open_array(store), store

    def native(name: str) -> Any:
        return zarr.open_array(place.zarr_store(name)), None

    def tensorstore(name: str) -> Any:
        metadata = {
            "shape": [args.size] * 3,
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [args.shard] * 3}},
            "codecs": [sharding_codec(args.chunk)],
            "fill_value": 0,
        }
        context = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        spec = {"driver": "zarr3", "kvstore": place.ts_kvstore(name), "metadata": metadata}
        return ts.open(spec, open=True, context=context).result(), None

    return {
        "asyncshard view": view,
        "asyncshard view, concurrency = chunks per shard": view,
        "zarr-python sharding codec": native,
        "tensorstore": tensorstore,
    }


def write_blocks(array: Any, data: np.ndarray, blocks: list[Block], threads: int) -> None:
    if hasattr(array, "write"):  # tensorstore

        def one(block: Block) -> None:
            array[block].write(data[block]).result()

    else:

        def one(block: Block) -> None:
            array[block] = data[block]

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, blocks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["local", "s3"], default="local")
    parser.add_argument("--size", type=int, default=512, help="array edge (512)")
    parser.add_argument("--chunk", type=int, default=32, help="inner chunk edge (32)")
    parser.add_argument("--shard", type=int, default=256, help="shard edge (256)")
    parser.add_argument("--block", type=int, default=128, help="block edge per write (128)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per S3 answer")
    parser.add_argument("--bandwidth", type=float, default=None, help="bytes/s per response")
    args = parser.parse_args()
    if args.size % args.block or args.block % args.chunk or args.shard % args.chunk:
        raise SystemExit("--size must be a multiple of --block, and both of --chunk")
    data = np.random.default_rng(0).integers(0, 256, (args.size,) * 3, dtype=np.uint8)
    edges = range(0, args.size, args.block)
    corners = itertools.product(edges, repeat=3)
    blocks = [tuple(slice(a, a + args.block) for a in c) for c in corners]
    per_shard = (args.shard // args.chunk) ** 3
    place = Place(args.backend, args.latency, args.bandwidth)
    try:
        every = writers(place, args)
        names = list(every)
        runs: dict[str, list[tuple[float, float, int, int, int]]] = {n: [] for n in names}
        for n in range(args.rounds):
            for name in names[n % len(names) :] + names[: n % len(names)]:
                array_name = f"a{names.index(name)}"
                create(place, array_name, args)
                array, store = every[name](array_name)
                raised = "concurrency =" in name
                config: AbstractContextManager[Any] = (
                    zarr.config.set({"async.concurrency": per_shard}) if raised else nullcontext()
                )
                with config:
                    cpu, started = cpu_now(), time.perf_counter()
                    write_blocks(array, data, blocks, args.threads)
                    wall, cpu = time.perf_counter() - started, cpu_now() - cpu
                puts = -1 if store is None else store.stats.requests["put"]
                gets = -1 if store is None else store.stats.requests["get"]
                back = zarr.open_array(place.zarr_store(array_name), mode="r")[...]
                lost = int(np.count_nonzero(back != data))
                runs[name].append((wall, cpu, puts, gets, lost))
                print(f"  round {n + 1}: {name}: {wall:.2f} s", file=sys.stderr)
                place.clear(array_name)
    finally:
        place.close()
    load = os.getloadavg()
    link = ""
    if place.proxy is not None:
        link = f" through a proxy ({args.latency * 1000:.0f} ms, {args.bandwidth or 0:,.0f} B/s)"
    print(
        f"\n{args.size}^3 uint8, chunks {args.chunk}^3, shards {args.shard}^3 ({per_shard} "
        f"chunks), blocks {args.block}^3 by {args.threads} threads, {args.backend}{link}; "
        f"median of {args.rounds} rounds; load average {load[0]:.2f}"
    )
    print("| writer | wall s | MB/s | CPU s | PUTs | GETs | values lost | view / writer |")
    print("|---|---|---|---|---|---|---|---|")
    ours = statistics.median(r[0] for r in runs["asyncshard view"])
    for name in names:
        wall = statistics.median(r[0] for r in runs[name])
        cpu = statistics.median(r[1] for r in runs[name])
        puts, gets = (statistics.median(r[i] for r in runs[name]) for i in (2, 3))
        lost = max(r[4] for r in runs[name])
        shown = "- | -" if puts < 0 else f"{puts:.0f} | {gets:.0f}"
        print(
            f"| {name} | {wall:.2f} | {data.nbytes / wall / MB:.0f} | {cpu:.2f} | {shown} "
            f"| {lost:,} | {wall / ours:.2f}x |"
        )


if __name__ == "__main__":
    main()
