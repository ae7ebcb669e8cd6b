#!/usr/bin/env python
"""Random chunk reads from a sharded precomputed volume: asyncshard vs tensorstore.

A ``neuroglancer_uint64_sharded_v1`` scale is written to a moto S3 server on loopback,
behind a counting proxy (``tests/servers/proxy.py``, optional added latency per request
to model a remote link). Both clients then read random chunk ids from it:

* asyncshard: :class:`Uint64ShardedStore` over the S3 ``CloudStore``, as one batch
  (``get_chunks``: coalesced data requests) and as concurrent single-chunk reads;
* tensorstore: its ``neuroglancer_uint64_sharded`` kvstore over its ``s3`` kvstore, as
  one ``ts.Batch`` and as concurrent unbatched reads; a ``cache_pool`` is given so that
  its indexes are cached like asyncshard's, and reads pass ``staleness_bound=inf`` so
  that cached indexes are used without revalidation requests (by default tensorstore
  revalidates them on every read; asyncshard instead conditions its data reads on the
  cached version, which costs no extra request).

Each is measured **cold** (a fresh client: every index is fetched) and **warm** (the same
client reads another random sample of the same size: indexes cached, data not). Printed
per row: chunks/s (median of ``--repeat`` runs), requests per chunk as counted by the
proxy (what the server saw), and the asyncshard/tensorstore throughput ratio. Both
clients' bytes are compared for equality. Run from the repository root::

    python benchmarks/bench_precomputed.py            # small default, well under a minute
    python benchmarks/bench_precomputed.py --grid 32 32 16 --sample 1000 --latency-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers

import tensorstore as ts

from asyncshard.backends import open_store
from asyncshard.cache import IndexCache
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale
from asyncshard.sharding.precomputed import Uint64ShardedStore
from asyncshard.store import Store
from benchmarks.common import aws_profile
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server, start_moto

SCALE_KEY = "s0"


@dataclass
class Row:
    client: str
    mode: str
    phase: str
    chunks_per_s: float
    requests_per_chunk: float


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", type=int, nargs=3, default=[16, 16, 8], help="chunks per axis")
    p.add_argument("--chunk", type=int, default=16, help="chunk edge in voxels (uint8)")
    p.add_argument("--sample", type=int, default=256, help="random chunks read per phase")
    p.add_argument("--repeat", type=int, default=2, help="runs per row (median reported)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="added per request (proxy)")
    p.add_argument("--gzip-data", action="store_true", help="gzip data encoding (default raw)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_spec(args: argparse.Namespace) -> ShardingSpec:
    return ShardingSpec(
        preshift_bits=2,
        hash="murmurhash3_x86_128",
        minishard_bits=4,
        shard_bits=3,
        minishard_index_encoding="gzip",
        data_encoding="gzip" if args.gzip_data else "raw",
    )


def make_scale(args: argparse.Namespace, spec: ShardingSpec) -> Scale:
    c = args.chunk
    return Scale(
        key=SCALE_KEY,
        size=(args.grid[0] * c, args.grid[1] * c, args.grid[2] * c),
        chunk_sizes=((c, c, c),),
        encoding="raw",
        sharding=spec,
    )


async def write_volume(store: Store, scale: Scale, seed: int) -> list[int]:
    """Write every chunk of ``scale`` as whole shards; return the chunk ids."""
    gx, gy, gz = scale.grid_shape
    grid = np.stack(np.meshgrid(range(gx), range(gy), range(gz), indexing="ij"), -1)
    ids: list[int] = scale.chunk_ids(grid.reshape(-1, 3)).tolist()
    rng = np.random.default_rng(seed)
    nbytes = int(np.prod(scale.chunk_size))
    # half noise, half constant: realistic-ish and not uniformly incompressible
    chunks = {
        i: (rng.integers(0, 256, nbytes // 2, dtype=np.uint8).tobytes() + bytes(nbytes // 2))
        for i in ids
    }
    assert scale.sharding is not None
    await Uint64ShardedStore(store, scale.sharding, prefix=SCALE_KEY).write_shards(chunks)
    return ids


def s3_options(server: S3Server, endpoint: str) -> dict[str, Any]:
    return server.options(endpoint=endpoint)


def ts_kvstore(
    server: S3Server, endpoint: str, prefix: str, spec: ShardingSpec, creds: Path
) -> Any:
    base = {
        "driver": "s3",
        "bucket": server.bucket,
        "endpoint": endpoint,
        "aws_region": server.region,
        "aws_credentials": {
            "type": "profile",
            "profile": "default",
            "credentials_file": str(creds / "credentials"),
            "config_file": str(creds / "config"),
        },
        "path": f"{prefix}/{SCALE_KEY}/",
    }
    context = ts.Context({"cache_pool": {"total_bytes_limit": 256 << 20}})
    spec_json = {"driver": "neuroglancer_uint64_sharded", "base": base, "metadata": spec.to_json()}
    return ts.KvStore.open(spec_json, context=context).result()


def ts_read(kv: Any, ids: Sequence[int], batched: bool) -> dict[int, bytes]:
    keys = [i.to_bytes(8, "big") for i in ids]
    # cached minishard indexes are used without revalidation (asyncshard instead conditions
    # its data reads on the cached version, which costs no extra request)
    bound = float("inf")
    if batched:
        with ts.Batch() as batch:
            futures = [kv.read(k, batch=batch, staleness_bound=bound) for k in keys]
    else:
        futures = [kv.read(k, staleness_bound=bound) for k in keys]
    results = [f.result() for f in futures]
    return {i: bytes(r.value) for i, r in zip(ids, results, strict=True) if r.state == "value"}


async def as_read(store: Uint64ShardedStore, ids: Sequence[int], batched: bool) -> dict[int, bytes]:
    if batched:
        return await store.get_chunks(ids)
    values = await asyncio.gather(*(store.get_chunk(i) for i in ids))
    return {i: v for i, v in zip(ids, values, strict=True) if v is not None}


def measure(
    proxy: FaultProxy, run: Callable[[], dict[int, bytes]]
) -> tuple[float, int, dict[int, bytes]]:
    """Wall time, requests the proxy saw, and the chunks read by ``run()``."""
    proxy.reset()
    start = time.perf_counter()
    got = run()
    elapsed = time.perf_counter() - start
    return elapsed, len(proxy.log), got


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    spec = make_spec(args)
    scale = make_scale(args, spec)
    server = start_moto()
    proxy = FaultProxy(server.endpoint, latency=args.latency_ms / 1000).start()
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            creds = Path(tmp)
            aws_profile(creds, server.access_key, server.secret_key, server.region)
            prefix = "bench"
            url = f"s3://{server.bucket}/{prefix}"
            setup = open_store(url, **s3_options(server, server.endpoint))
            t0 = time.perf_counter()
            ids = loop.run_until_complete(write_volume(setup, scale, args.seed))
            loop.run_until_complete(setup.close())
            print(
                f"volume: grid {tuple(args.grid)}, {len(ids)} chunks of "
                f"{int(np.prod(scale.chunk_size))} B, {spec.num_shards} shards x "
                f"{spec.num_minishards} minishards, data {spec.data_encoding}, "
                f"written in {time.perf_counter() - t0:.1f} s; latency {args.latency_ms} ms/request"
            )
            rows = run_all(args, loop, server, proxy, creds, url, prefix, spec, ids)
            report(rows, min(args.sample, len(ids) // 2), args.repeat)
    finally:
        loop.close()
        proxy.stop()
        server.stop()


def run_all(
    args: argparse.Namespace,
    loop: asyncio.AbstractEventLoop,
    server: S3Server,
    proxy: FaultProxy,
    creds: Path,
    url: str,
    prefix: str,
    spec: ShardingSpec,
    ids: list[int],
) -> list[Row]:
    rng = np.random.default_rng(args.seed + 1)
    n = min(args.sample, len(ids) // 2)
    rows: list[Row] = []
    for mode, batched in (("batch", True), ("concurrent", False)):
        timings: dict[tuple[str, str], list[float]] = {}
        requests: dict[tuple[str, str], int] = {}
        for _ in range(args.repeat):
            picked = rng.choice(len(ids), size=2 * n, replace=False)
            cold_ids = [ids[i] for i in picked[:n]]
            warm_ids = [ids[i] for i in picked[n:]]
            store = Uint64ShardedStore(
                open_store(url, **s3_options(server, proxy.url)),
                spec,
                prefix=SCALE_KEY,
                cache=IndexCache(),
            )
            kv = ts_kvstore(server, proxy.url, prefix, spec, creds)
            results: dict[str, dict[int, bytes]] = {}
            for client in ("asyncshard", "tensorstore"):
                for phase, sample in (("cold", cold_ids), ("warm", warm_ids)):
                    run: Callable[[], dict[int, bytes]]
                    if client == "asyncshard":
                        run = partial(loop.run_until_complete, as_read(store, sample, batched))
                    else:
                        run = partial(ts_read, kv, sample, batched)
                    elapsed, nreq, got = measure(proxy, run)
                    assert len(got) == len(sample), f"{client} {phase}: missing chunks"
                    results[f"{client}-{phase}"] = got
                    timings.setdefault((client, phase), []).append(elapsed)
                    requests.setdefault((client, phase), nreq)
            for phase in ("cold", "warm"):
                if results[f"asyncshard-{phase}"] != results[f"tensorstore-{phase}"]:
                    raise SystemExit(f"MISMATCH: the clients read different bytes ({phase})")
            loop.run_until_complete(store.close())
        for (client, phase), times in timings.items():
            rows.append(
                Row(client, mode, phase, n / statistics.median(times), requests[client, phase] / n)
            )
    return rows


def report(rows: list[Row], n: int, repeat: int) -> None:
    print(f"\n{n} random chunks per phase, median of {repeat} runs; requests seen by the proxy")
    print(f"{'mode':<11} {'phase':<5} {'client':<12} {'chunks/s':>10} {'req/chunk':>10}")
    by_key = {(r.mode, r.phase, r.client): r for r in rows}
    for mode in ("batch", "concurrent"):
        for phase in ("cold", "warm"):
            for client in ("asyncshard", "tensorstore"):
                r = by_key[mode, phase, client]
                print(
                    f"{mode:<11} {phase:<5} {client:<12} {r.chunks_per_s:>10.0f} "
                    f"{r.requests_per_chunk:>10.3f}"
                )
            ratio = (
                by_key[mode, phase, "asyncshard"].chunks_per_s
                / by_key[mode, phase, "tensorstore"].chunks_per_s
            )
            print(f"{'':<11} {'':<5} {'ratio as/ts':<12} {ratio:>10.2f}x")


if __name__ == "__main__":
    main()
