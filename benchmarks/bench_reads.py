#!/usr/bin/env python
"""Random chunk reads over loopback HTTP (nginx): asyncshard beside its peers, one run.

Two datasets, written by tensorstore into a temporary folder that nginx serves:

* **zarr**: a 512x512x256 uint8 Zarr v3 array, 32^3 inner chunks, 128 shards;
* **precomputed**: a 512x512x256 uint8 volume, 32^3 chunks, murmurhash sharding.

Readers of random chunks (each a fresh client: "cold"; then the same client on another
random sample of the same size: "warm", indexes cached, data not; "cached" rows read
the warm sample again, for readers that cache data):

* ``obstore``: the raw ceiling, ``get_range_async`` on the exact byte ranges;
* ``asyncshard``: single ``get``s with 32 in flight and all submitted at once, plus a
  batch (``get_partial_values`` / ``get_chunks``), with and without the data cache;
* ``tensorstore``: default context, and with a ``cache_pool`` (``recheck_cached_data:
  open``: no revalidation, like asyncshard's data cache within ``recheck_after``);
* ``zarr-python``: its ``ObjectStore`` (zarr only), 32 reads in flight;
* ``cloud-volume``: 32 threads, one chunk per ``cv[...]`` (precomputed only; skipped
  with a message when it is not installed: ``pip install cloud-volume``).

Every reader runs on the same event loop, ``--loop`` (uvloop by default, as asyncshard's
entry points; ``asyncio`` for what ``asyncio.run`` gives): tensorstore's and obstore's
futures complete through the loop too. Printed per row: chunks/s, CPU-ms per chunk
(``getrusage``: every thread of this process), requests per chunk (nginx's access log),
each as a ratio to asyncshard in the same mode; medians of ``--rounds`` interleaved
rounds. nginx is apt-installed if missing.

    python benchmarks/bench_reads.py [--chunks 2000] [--rounds 3] [--only zarr] [--loop asyncio]
    python benchmarks/bench_reads.py --only zarr --chunks 100000 --rounds 1 \
        --readers "asyncshard get, 32;asyncshard get, all;tensorstore, 32"
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import tensorstore as ts
from obstore.store import HTTPStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asyncshard import loops, open_store
from asyncshard.cache import LoadingCache
from asyncshard.sharding import PrecomputedVolume, ZarrShardedStore
from benchmarks.common import (
    Timed,
    add_loop_argument,
    bounded,
    cpu_now,
    sharding_codec,
    use_loop,
)
from benchmarks.nginx import Nginx

SHAPE = (512, 512, 256)
CHUNK = 32
SHARD = (128, 64, 64)  # 4 x 2 x 2 = 16 inner chunks per shard, 128 shards
GRID = tuple(s // CHUNK for s in SHAPE)
IN_FLIGHT = 32
PRECOMPUTED_SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 6,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 3,
    "shard_bits": 4,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}

Coords = tuple[int, int, int]


def write_datasets(root: Path, only: str | None) -> None:
    data = np.random.default_rng(0).integers(0, 255, SHAPE, dtype=np.uint8)
    if only in (None, "zarr"):
        arr = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": f"{root}/arr/"},
                "metadata": {
                    "shape": list(SHAPE),
                    "data_type": "uint8",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": SHARD}},
                    "codecs": [sharding_codec(CHUNK)],
                },
                "create": True,
            }
        ).result()
        arr[...] = data
    if only in (None, "precomputed"):
        vol = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": f"{root}/vol/"},
                "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
                "scale_metadata": {
                    "size": list(SHAPE),
                    "chunk_size": [CHUNK] * 3,
                    "encoding": "raw",
                    "resolution": [8, 8, 8],
                    "sharding": PRECOMPUTED_SHARDING,
                },
                "create": True,
            }
        ).result()
        vol[..., 0] = data


def sample(n: int, seed: int) -> list[Coords]:
    rng = random.Random(seed)
    return [
        (rng.randrange(GRID[0]), rng.randrange(GRID[1]), rng.randrange(GRID[2])) for _ in range(n)
    ]


@dataclass
class Run(Timed):
    requests: int

    @property
    def per_chunk(self) -> float:
        return self.requests / self.chunks


async def measure(server: Nginx, n: int, work: Callable[[], Awaitable[object]]) -> Run:
    before_requests, before_cpu, start = server.requests(), cpu_now(), time.perf_counter()
    await work()
    seconds = time.perf_counter() - start
    await asyncio.sleep(0.05)  # nginx logs a request when it is done
    return Run(n, seconds, cpu_now() - before_cpu, server.requests() - before_requests)


async def run_bounded(
    items: Sequence[Any], read: Callable[[Any], Awaitable[object]], n: int
) -> None:
    """``read`` every item, at most ``n`` at a time."""
    await bounded(n, [functools.partial(read, item) for item in items])


# ------------------------------------------------------------------------------- readers
# Each reader: async (server, cold sample, warm sample) -> {row name: Run}


async def zarr_raw(server: Nginx, cold: list[Coords], warm: list[Coords]) -> dict[str, Run]:
    store = await ZarrShardedStore.open(open_store(server.url + "/"), "arr", cache=LoadingCache())
    ranges = []
    for c in warm:
        loc = store.format.locate("arr/c/{}/{}/{}".format(*c))
        assert loc is not None
        found = await store.format.find(store.indexes, loc.shard_key, [loc.chunk])
        ranges.append((loc.shard_key, *found.entries[loc.chunk]))
    return {"warm 32": await raw_ceiling(server, ranges)}


def zarr_keys(coords: list[Coords]) -> list[str]:
    return ["arr/c/{}/{}/{}".format(*c) for c in coords]


async def zarr_asyncshard(
    server: Nginx,
    cold: list[Coords],
    warm: list[Coords],
    *,
    in_flight: int | None,
    data_cache: bool,
) -> dict[str, Run]:
    store = await ZarrShardedStore.open(
        open_store(server.url + "/"),
        "arr",
        cache=LoadingCache(),
        data_cache=LoadingCache(1 << 30) if data_cache else None,
    )

    async def read(keys: list[str]) -> None:
        if in_flight is None:
            await asyncio.gather(*(store.get(k) for k in keys))
        else:
            await run_bounded(keys, store.get, in_flight)

    out = {
        "cold": await measure(server, len(cold), lambda: read(zarr_keys(cold))),
        "warm": await measure(server, len(warm), lambda: read(zarr_keys(warm))),
    }
    if data_cache:
        out["cached"] = await measure(server, len(warm), lambda: read(zarr_keys(warm)))
    await store.close()
    return out


async def zarr_tensorstore(
    server: Nginx, cold: list[Coords], warm: list[Coords], *, cache_pool: bool
) -> dict[str, Run]:
    context = {"cache_pool": {"total_bytes_limit": 1 << 30}} if cache_pool else {}
    spec: dict[str, Any] = {"driver": "zarr3", "kvstore": f"{server.url}/arr/"}
    if cache_pool:
        spec["recheck_cached_data"] = "open"
        spec["recheck_cached_metadata"] = "open"
    arr = await ts.open(spec, read=True, context=ts.Context(context))

    async def read(coords: list[Coords]) -> None:
        async def one(c: Coords) -> None:
            x, y, z = (v * CHUNK for v in c)
            await arr[x : x + CHUNK, y : y + CHUNK, z : z + CHUNK].read()

        await run_bounded(coords, one, IN_FLIGHT)

    out = {
        "cold": await measure(server, len(cold), lambda: read(cold)),
        "warm": await measure(server, len(warm), lambda: read(warm)),
    }
    if cache_pool:
        out["cached"] = await measure(server, len(warm), lambda: read(warm))
    return out


async def zarr_python(server: Nginx, cold: list[Coords], warm: list[Coords]) -> dict[str, Run]:
    import zarr.api.asynchronous
    from zarr.storage import ObjectStore

    store = ObjectStore(
        HTTPStore.from_url(server.url, client_options={"allow_http": True}), read_only=True
    )
    arr = await zarr.api.asynchronous.open_array(store=store, path="arr", mode="r")

    async def read(coords: list[Coords]) -> None:
        async def one(c: Coords) -> None:
            x, y, z = (v * CHUNK for v in c)
            await arr.getitem((slice(x, x + CHUNK), slice(y, y + CHUNK), slice(z, z + CHUNK)))

        await run_bounded(coords, one, IN_FLIGHT)

    return {
        "cold": await measure(server, len(cold), lambda: read(cold)),
        "warm": await measure(server, len(warm), lambda: read(warm)),
    }


def raw_range(raw: HTTPStore, r: tuple[str, int, int]) -> Awaitable[object]:
    return obstore.get_range_async(raw, r[0], start=r[1], end=r[2])


async def raw_ceiling(server: Nginx, ranges: list[tuple[str, int, int]]) -> Run:
    """obstore ``get_range_async`` on the exact byte ranges, ``IN_FLIGHT`` at a time."""
    raw = HTTPStore.from_url(server.url, client_options={"allow_http": True})
    return await measure(
        server,
        len(ranges),
        lambda: run_bounded(ranges, lambda r: raw_range(raw, r), IN_FLIGHT),
    )


def chunk_names(coords: list[Coords]) -> list[str]:
    return [
        "{}-{}_{}-{}_{}-{}".format(*(v for c in p for v in (c * CHUNK, (c + 1) * CHUNK)))
        for p in coords
    ]


async def pc_raw(server: Nginx, cold: list[Coords], warm: list[Coords]) -> dict[str, Run]:
    volume = await PrecomputedVolume.open(open_store(server.url + "/"), "vol", cache=LoadingCache())
    scale = volume.scale(volume.sharded_scale_keys[0])
    store = scale.store
    ranges = []
    for c in warm:
        chunk_id = scale.scale.chunk_id(c)
        shard_key = store.shard_key(chunk_id)
        found = await store.format.find(store.indexes, shard_key, [chunk_id])
        ranges.append((shard_key, *found.entries[chunk_id]))
    return {"warm 32": await raw_ceiling(server, ranges)}


async def pc_asyncshard(
    server: Nginx, cold: list[Coords], warm: list[Coords], *, mode: str
) -> dict[str, Run]:
    volume = await PrecomputedVolume.open(open_store(server.url + "/"), "vol", cache=LoadingCache())
    scale = volume.scale(volume.sharded_scale_keys[0])

    async def read(coords: list[Coords]) -> None:
        names = chunk_names(coords)
        if mode == "batch":
            await scale.get_chunks(names)
        elif mode == "all":
            await asyncio.gather(*(scale.get_chunk(n) for n in names))
        else:
            await run_bounded(names, scale.get_chunk, IN_FLIGHT)

    return {
        "cold": await measure(server, len(cold), lambda: read(cold)),
        "warm": await measure(server, len(warm), lambda: read(warm)),
    }


async def pc_tensorstore(server: Nginx, cold: list[Coords], warm: list[Coords]) -> dict[str, Run]:
    arr = await ts.open(
        {"driver": "neuroglancer_precomputed", "kvstore": f"{server.url}/vol/"},
        read=True,
        context=ts.Context(),
    )

    async def read(coords: list[Coords]) -> None:
        async def one(c: Coords) -> None:
            x, y, z = (v * CHUNK for v in c)
            await arr[x : x + CHUNK, y : y + CHUNK, z : z + CHUNK].read()

        await run_bounded(coords, one, IN_FLIGHT)

    return {
        "cold": await measure(server, len(cold), lambda: read(cold)),
        "warm": await measure(server, len(warm), lambda: read(warm)),
    }


async def pc_cloudvolume(server: Nginx, cold: list[Coords], warm: list[Coords]) -> dict[str, Run]:
    from cloudvolume import CloudVolume

    cv = CloudVolume(f"precomputed://{server.url}/vol", progress=False, parallel=1, cache=False)

    def one(c: Coords) -> None:
        x, y, z = (v * CHUNK for v in c)
        cv[x : x + CHUNK, y : y + CHUNK, z : z + CHUNK]

    async def read(coords: list[Coords]) -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            await asyncio.gather(*(loop.run_in_executor(pool, one, c) for c in coords))

    return {
        "cold": await measure(server, len(cold), lambda: read(cold)),
        "warm": await measure(server, len(warm), lambda: read(warm)),
    }


def have_cloudvolume() -> bool:
    try:
        import cloudvolume  # noqa: F401
    except ImportError:
        print("cloud-volume is not installed: its rows are skipped (pip install cloud-volume)")
        return False
    return True


Reader = Callable[[Nginx, list[Coords], list[Coords]], Awaitable[dict[str, Run]]]


def readers(dataset: str) -> dict[str, tuple[Reader, str]]:
    """``{label: (reader, asyncshard label it is compared with)}``."""
    if dataset == "zarr":
        return {
            "obstore raw ranges": (zarr_raw, "asyncshard get, 32 in flight"),
            "asyncshard get, 32 in flight": (
                lambda s, c, w: zarr_asyncshard(s, c, w, in_flight=IN_FLIGHT, data_cache=False),
                "",
            ),
            "asyncshard get, all at once": (
                lambda s, c, w: zarr_asyncshard(s, c, w, in_flight=None, data_cache=False),
                "",
            ),
            "asyncshard get + data cache, 32": (
                lambda s, c, w: zarr_asyncshard(s, c, w, in_flight=IN_FLIGHT, data_cache=True),
                "",
            ),
            "tensorstore, 32 in flight": (
                lambda s, c, w: zarr_tensorstore(s, c, w, cache_pool=False),
                "asyncshard get, 32 in flight",
            ),
            "tensorstore + cache_pool, 32": (
                lambda s, c, w: zarr_tensorstore(s, c, w, cache_pool=True),
                "asyncshard get + data cache, 32",
            ),
            "zarr-python ObjectStore, 32": (zarr_python, "asyncshard get, 32 in flight"),
        }
    rows: dict[str, tuple[Reader, str]] = {
        "obstore raw ranges": (pc_raw, "asyncshard get_chunk, 32"),
        "asyncshard get_chunk, 32": (lambda s, c, w: pc_asyncshard(s, c, w, mode="32"), ""),
        "asyncshard get_chunk, all": (lambda s, c, w: pc_asyncshard(s, c, w, mode="all"), ""),
        "asyncshard get_chunks batch": (lambda s, c, w: pc_asyncshard(s, c, w, mode="batch"), ""),
        "tensorstore, 32 in flight": (pc_tensorstore, "asyncshard get_chunk, 32"),
    }
    if have_cloudvolume():
        rows["cloud-volume, 32 threads"] = (pc_cloudvolume, "asyncshard get_chunk, 32")
    return rows


async def run_dataset(
    server: Nginx, dataset: str, n: int, rounds: int, only: list[str] | None = None
) -> None:
    table = readers(dataset)
    if only:
        table = {k: v for k, v in table.items() if any(k.startswith(o) for o in only)}
    results: dict[tuple[str, str], list[Run]] = {}
    for r in range(rounds):
        for label, (reader, _) in table.items():
            cold, warm = sample(n, 2 * r), sample(n, 2 * r + 1)
            for row, run in (await reader(server, cold, warm)).items():
                results.setdefault((label, row), []).append(run)
    load = os.getloadavg()[0]
    print(f"\n{dataset}: {n} random {CHUNK}^3 chunks, median of {rounds} rounds, load {load:.1f}")
    head = ("reader", "phase", "chunks/s", "CPU-ms", "req/chk", "x rate", "x CPU")
    print("{:36} {:8} {:>9} {:>7} {:>7} {:>7} {:>6}".format(*head))
    med: dict[tuple[str, str], tuple[float, float, float]] = {}
    for key, runs in results.items():
        med[key] = (
            statistics.median(r.rate for r in runs),
            statistics.median(r.cpu_ms for r in runs),
            statistics.median(r.per_chunk for r in runs),
        )
    for (label, row), (rate, cpu, per) in med.items():
        base = table[label][1] or label
        ref = med.get((base, row)) or med.get((base, "warm"))
        ratio = f"{rate / ref[0]:6.2f}x {cpu / ref[1]:5.2f}x" if ref and base != label else ""
        print(f"{label:36} {row:8} {rate:9.0f} {cpu:7.3f} {per:7.2f} {ratio}")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="asyncshard-bench-") as tmp:
        write_datasets(Path(tmp), args.only)
        with Nginx(tmp) as server:
            for dataset in ("zarr", "precomputed"):
                if args.only in (None, dataset):
                    only = args.readers.split(";") if args.readers else None
                    await run_dataset(server, dataset, args.chunks, args.rounds, only)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["zarr", "precomputed"])
    parser.add_argument(
        "--readers", help="only the readers whose labels start with one of these (;-separated)"
    )
    add_loop_argument(parser, "the event loop every reader runs on")
    arguments = parser.parse_args()
    use_loop(arguments.loop)
    print(f"event loop: {arguments.loop}")
    loops.run(main(arguments))
