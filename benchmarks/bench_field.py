#!/usr/bin/env python
"""Field load on loopback: a long round trip and a throttling store, asyncshard beside
its peers in one run (issue 43). Proxies in benchmarks/field_proxies.py, each its own
process; every reader and every conversion runs in a fresh process, interleaved over
``--rounds`` rounds (medians kept).

* **viewer**: single-chunk reads of a sharded Zarr v3 array (512x512x256 uint8, 32^3
  chunks in 128 shards, written by tensorstore) served by nginx behind the latency
  proxy (``--delays``, each with its reads in flight: ``20:32,60:128``). Readers, each
  with default options: ``asyncshard`` (``ZarrShardedStore.get``), ``tensorstore`` (one
  ``read`` per chunk) and the **ideal** reader: plain aiohttp on the same byte ranges
  (known in advance), no connection limit. A cold sample, then a warm one (other chunks
  of the same shards' indexes, cached by the readers that cache them). Requests are
  counted in nginx's access log, new connections at the latency proxy (each costs one
  more round trip); the rate is the median of the rounds, with their range, and the
  speed over the ideal's is also taken round by round (the readers of a round run one
  after another, so a busy spell of a shared machine hits both), median and range.
* **region**: the same array and proxy (``--region-delays``), ``--regions`` boxes of
  4x4x4 chunks (128^3 voxels, 2 MiB) at random chunk offsets, read one after another:
  ``asyncshard`` (``get_partial_values`` of the box's chunk keys on the sharded store:
  its own region read path) and ``tensorstore`` (one ``read`` of the box). The boxes
  cold, then the same boxes again warm (indexes cached; neither caches data).
* **throttle**: ``shard --to`` of a flat array of 1,024 chunk objects (128x64x64 uint8,
  8^3 chunks, 4^3-chunk shards) on SeaweedFS behind the throttling front at
  ``--rates`` requests/s (``503 SlowDown``, no Retry-After), beside tensorstore copying
  the same array into the same sharded layout through the same front. Printed: time,
  requests seen and refused at the front, and time over what the allowed rate needs
  for the requests that got through. Every copy is read back and compared.

    python benchmarks/bench_field.py [--only viewer|region|throttle] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import bounded

HERE = Path(__file__).resolve().parent
CHUNK, GRID = 32, (16, 16, 8)
REGION = 4  # chunks along each axis of a region read
INDEX = 16 * 16 + 4  # a shard's index: 16 chunks of 16 bytes, and a crc32c


# --------------------------------------------------------------------------- processes


@contextmanager
def proxy(*argv: str) -> Iterator[str]:
    """A proxy of field_proxies.py in its own process; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "field_proxies.py"), *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    url = proc.stdout.readline().strip()
    try:
        yield url
    finally:
        proc.stdin.close()
        proc.wait(10)


def spawn(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env, check=False)
    lines = out.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"{argv[2:4]} failed with status {out.returncode}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def this(job: str, **args: Any) -> list[str]:
    return [sys.executable, __file__, "--child", job, json.dumps(args)]


# --------------------------------------------------------------------------- viewer


def log_lines(path: str) -> int:
    return Path(path).read_bytes().count(b"\n")


async def viewer_child(args: dict[str, Any]) -> dict[str, Any]:
    """One reader in this fresh process: cold then warm sample, seconds and requests."""
    url, reader, n = args["url"], args["reader"], args["in_flight"]
    samples = {"cold": args["cold"], "warm": args["warm"]}
    read: Callable[[Any], Awaitable[object]]
    if reader == "asyncshard":
        from asyncshard import open_store
        from asyncshard.cache import LoadingCache
        from asyncshard.sharding import ZarrShardedStore

        store = await ZarrShardedStore.open(open_store(url + "/"), "arr", cache=LoadingCache())
        read = store.get
    elif reader == "tensorstore":
        import tensorstore as ts

        arr = await ts.open({"driver": "zarr3", "kvstore": f"{url}/arr/"}, read=True)

        async def read(key: str) -> None:
            x, y, z = (int(v) * CHUNK for v in key.split("/")[-3:])
            await arr[x : x + CHUNK, y : y + CHUNK, z : z + CHUNK].read()

    else:  # the ideal: aiohttp on the known byte ranges, no connection limit
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        ranges = args["ranges"]
        index_reads: dict[str, asyncio.Task[bytes]] = {}

        async def fetch(shard: str, header: str) -> bytes:
            async with session.get(f"{url}/{shard}", headers={"Range": header}) as answer:
                return await answer.read()

        async def read(key: str) -> None:
            shard, start, end = ranges[key]
            indexed = args["indexed"]
            if indexed and shard not in index_reads:  # cold: its index first, once
                index_reads[shard] = asyncio.ensure_future(fetch(shard, f"bytes=-{INDEX}"))
            if indexed:
                await index_reads[shard]
            await fetch(shard, f"bytes={start}-{end - 1}")

    out: dict[str, Any] = {}
    for name, keys in samples.items():
        args["indexed"] = name == "cold"  # the ideal pays the shard index reads cold
        before, start = log_lines(args["log"]), time.perf_counter()
        opened = log_lines(args["connections"])
        await bounded(n, [lambda k=k: read(k) for k in keys])
        seconds = time.perf_counter() - start
        await asyncio.sleep(0.2)  # nginx logs a request once the proxy took its answer
        out[name] = {
            "s": seconds,
            "requests": log_lines(args["log"]) - before,
            "connections": log_lines(args["connections"]) - opened,
        }
    if reader == "ideal":
        await session.close()
    return out


async def region_child(args: dict[str, Any]) -> dict[str, Any]:
    """One region reader in this fresh process: the boxes cold, then warm."""
    url, reader, boxes = args["url"], args["reader"], args["boxes"]
    read: Callable[[list[int]], Awaitable[object]]
    if reader == "asyncshard":
        from asyncshard import open_store
        from asyncshard.cache import LoadingCache
        from asyncshard.sharding import ZarrShardedStore

        store = await ZarrShardedStore.open(open_store(url + "/"), "arr", cache=LoadingCache())

        async def read(box: list[int]) -> None:
            x0, y0, z0 = box
            keys = [
                f"arr/c/{x}/{y}/{z}"
                for x in range(x0, x0 + REGION)
                for y in range(y0, y0 + REGION)
                for z in range(z0, z0 + REGION)
            ]
            got = await store.get_partial_values([(k, None) for k in keys])
            assert all(g is not None and len(g) == CHUNK**3 for g in got)

    else:
        import tensorstore as ts

        arr = await ts.open({"driver": "zarr3", "kvstore": f"{url}/arr/"}, read=True)

        async def read(box: list[int]) -> None:
            x, y, z = (v * CHUNK for v in box)
            side = REGION * CHUNK
            await arr[x : x + side, y : y + side, z : z + side].read()

    out: dict[str, Any] = {}
    for name in ("cold", "warm"):
        before, start = log_lines(args["log"]), time.perf_counter()
        for box in boxes:
            await read(box)
        seconds = time.perf_counter() - start
        await asyncio.sleep(0.2)
        out[name] = {"s": seconds, "requests": log_lines(args["log"]) - before}
    return out


def region(args: argparse.Namespace, work: Path) -> list[str]:
    from benchmarks.bench_reads import write_datasets
    from benchmarks.nginx import Nginx

    root = work / "region"
    root.mkdir()
    write_datasets(root, "zarr")
    rng = random.Random(1)
    boxes = [[rng.randrange(g - REGION + 1) for g in GRID] for _ in range(args.regions)]
    chunks = args.regions * REGION**3
    rows = []
    with Nginx(root) as server:
        log = str(server._prefix / "access.log")
        upstream = server.url.removeprefix("http://")
        for delay_ms in (int(v) for v in args.region_delays.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {}
            with proxy("latency", "--upstream", upstream, "--delay", str(delay_ms / 1000)) as url:
                readers = ["asyncshard", "tensorstore"]
                for r in range(args.rounds):
                    for reader in readers[r % 2 :] + readers[: r % 2]:
                        job = {"url": url, "reader": reader, "log": log, "boxes": boxes}
                        runs.setdefault(reader, []).append(spawn(this("region", **job)))
            rows += region_rows(delay_ms, chunks, runs)
    return rows


def region_rows(delay_ms: int, chunks: int, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    def med(who: str, phase: str, what: str) -> float:
        return float(statistics.median(r[phase][what] for r in runs[who]))

    rows = []
    for reader in ("asyncshard", "tensorstore"):
        for phase in ("cold", "warm"):
            seconds = med(reader, phase, "s")
            rows.append(
                f"| {delay_ms} ms | {reader} | {phase} | {seconds:.2f} s | "
                f"{med(reader, phase, 'requests') / chunks:.3f} | "
                f"{med('tensorstore', phase, 's') / seconds:.2f}x |"
            )
    return rows


def chunk_ranges(root: Path, keys: list[str]) -> dict[str, tuple[str, int, int]]:
    from asyncshard import open_store
    from asyncshard.cache import LoadingCache
    from asyncshard.sharding import ZarrShardedStore

    async def find() -> dict[str, tuple[str, int, int]]:
        store = await ZarrShardedStore.open(open_store(str(root)), "arr", cache=LoadingCache())
        out = {}
        for key in keys:
            loc = store.format.locate(key)
            assert loc is not None
            found = await store.format.find(store.indexes, loc.shard_key, [loc.chunk])
            out[key] = (loc.shard_key, *found.entries[loc.chunk])
        return out

    return asyncio.run(find())


def viewer(args: argparse.Namespace, work: Path) -> list[str]:
    from benchmarks.bench_reads import write_datasets
    from benchmarks.nginx import Nginx

    root = work / "viewer"
    root.mkdir()
    write_datasets(root, "zarr")
    rng = random.Random(0)
    grid = [(x, y, z) for x in range(GRID[0]) for y in range(GRID[1]) for z in range(GRID[2])]
    rng.shuffle(grid)
    cold = ["arr/c/{}/{}/{}".format(*c) for c in grid[: args.chunks]]
    warm = ["arr/c/{}/{}/{}".format(*c) for c in grid[args.chunks : 2 * args.chunks]]
    ranges = chunk_ranges(root, cold + warm)
    rows = []
    opened = work / "connections"  # the latency proxy's record of accepted connections
    opened.touch()
    with Nginx(root) as server:
        log = str(server._prefix / "access.log")
        upstream = server.url.removeprefix("http://")
        for spec in args.delays.split(","):
            delay_ms, in_flight = (int(v) for v in spec.split(":"))
            runs: dict[str, list[dict[str, Any]]] = {}
            delay = str(delay_ms / 1000)
            with proxy(
                "latency", "--upstream", upstream, "--delay", delay, "--connections", str(opened)
            ) as url:
                readers = ["asyncshard", "ideal", "tensorstore"]
                for r in range(args.rounds):
                    for reader in readers[r % 3 :] + readers[: r % 3]:
                        job = {"url": url, "reader": reader, "in_flight": in_flight, "log": log}
                        job.update(cold=cold, warm=warm, ranges=ranges, connections=str(opened))
                        runs.setdefault(reader, []).append(spawn(this("viewer", **job)))
            rows += viewer_rows(delay_ms, in_flight, len(warm), runs)
    return rows


def viewer_rows(
    delay_ms: int, in_flight: int, n: int, runs: dict[str, list[dict[str, Any]]]
) -> list[str]:
    def rate(reader: str, phase: str) -> float:
        return float(statistics.median(n / r[phase]["s"] for r in runs[reader]))

    def per_chunk(reader: str, phase: str) -> float:
        return float(statistics.median(r[phase]["requests"] / n for r in runs[reader]))

    def spread(reader: str, phase: str) -> str:
        rates = [n / r[phase]["s"] for r in runs[reader]]
        return f"{min(rates):,.0f}-{max(rates):,.0f}"

    def opened(reader: str, phase: str) -> float:
        return float(statistics.median(r[phase]["connections"] for r in runs[reader]))

    def paired(reader: str, phase: str) -> str:
        """Speed over the ideal's in the same round (run next to it): median, range."""
        pairs = zip(runs[reader], runs["ideal"], strict=True)
        ratios = [i[phase]["s"] / r[phase]["s"] for r, i in pairs]
        low, mid, high = min(ratios), statistics.median(ratios), max(ratios)
        return f"{mid:.2f}x ({low:.2f}-{high:.2f})"

    rows = []
    for reader in ("asyncshard", "tensorstore", "ideal"):
        for phase in ("cold", "warm"):
            mine = rate(reader, phase)
            vs_ts = mine / rate("tensorstore", phase)
            rows.append(
                f"| {delay_ms} ms | {in_flight} | {reader} | {phase} | {mine:,.0f} | "
                f"{spread(reader, phase)} | {per_chunk(reader, phase):.2f} | "
                f"{opened(reader, phase):.0f} | {mine / rate('ideal', 'warm'):.2f}x | "
                f"{mine / rate('ideal', phase):.2f}x | {paired(reader, phase)} | {vs_ts:.2f}x |"
            )
    return rows


# --------------------------------------------------------------------------- throttle


def throttle(args: argparse.Namespace, work: Path) -> list[str]:
    from benchmarks.bench_convert import array_digest, child_argv, on_s3
    from tests.servers.seaweedfs import start_seaweedfs

    server = start_seaweedfs()
    try:
        direct = server.options()
        os.environ.update(  # the local server's, for tensorstore (here and in children)
            AWS_ACCESS_KEY_ID=server.access_key,
            AWS_SECRET_ACCESS_KEY=server.secret_key,
            AWS_REGION=server.region,
        )
        env = dict(os.environ)
        flat = work / "flat"
        make_flat(flat)
        base = f"s3://{server.bucket}/field"
        files = {str(p.relative_to(flat)): p.read_bytes() for p in flat.rglob("*") if p.is_file()}

        async def upload(store: Any) -> None:
            await asyncio.gather(*(store.set(k, v) for k, v in files.items()))

        on_s3(f"{base}/src", direct, upload)
        want = array_digest(f"{base}/src", direct)
        rows = []
        for rate in (float(r) for r in args.rates.split(",")):
            with proxy("throttle", "--upstream", server.endpoint, "--rate", str(rate)) as url:
                through = {**direct, "endpoint": url}
                runs: dict[str, list[dict[str, float]]] = {}
                tools = ["asyncshard-shard-to", "tensorstore"]
                for r in range(args.rounds):
                    for tool in tools[r % 2 :] + tools[: r % 2]:
                        dst = f"{base}/out-{tool}-{rate:g}-{r}"
                        job = {"src": f"{base}/src", "dst": dst, "shard": 4, "chunk": 8}
                        before = front_stats(url)
                        try:
                            answer = spawn(child_argv(tool, storage=through, **job), env)
                        except RuntimeError as exc:
                            answer = {"s": float("nan"), "failed": str(exc)}
                        after = front_stats(url)
                        seen = after["seen"] - before["seen"]
                        refused = after["refused"] - before["refused"]
                        ok = "failed" not in answer and array_digest(dst, direct) == want
                        runs.setdefault(tool, []).append(
                            {"s": answer["s"], "seen": seen, "refused": refused, "ok": ok}
                        )
                rows += throttle_rows(rate, runs)
        return rows
    finally:
        server.stop()


def make_flat(root: Path) -> None:
    import numpy as np
    import zarr

    arr = zarr.create_array(
        str(root), shape=(128, 64, 64), chunks=(8, 8, 8), dtype="uint8", compressors=None
    )
    arr[...] = np.random.default_rng(0).integers(0, 256, (128, 64, 64), dtype=np.uint8)


def front_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/__proxy__/stats") as answer:
        stats: dict[str, int] = json.loads(answer.read())
        return stats


def throttle_rows(rate: float, runs: dict[str, list[dict[str, float]]]) -> list[str]:
    def med(tool: str, what: str) -> float:
        return float(statistics.median(r[what] for r in runs[tool]))

    rows = []
    for tool in ("asyncshard-shard-to", "tensorstore"):
        seconds, seen, refused = med(tool, "s"), med(tool, "seen"), med(tool, "refused")
        needed = (seen - refused) / rate
        ok = all(r["ok"] for r in runs[tool])
        vs = seconds / med("tensorstore", "s")
        rows.append(
            f"| {rate:g}/s | {tool.removesuffix('-shard-to')} | {seconds:.1f} s | "
            f"{seen:.0f} | {100 * refused / max(seen, 1):.1f} % | {seconds / needed:.2f}x | "
            f"{vs:.2f}x | {'yes' if ok else 'NO'} |"
        )
    return rows


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("viewer", "region", "throttle"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=1000, help="chunks per viewer sample")
    parser.add_argument("--delays", default="20:32,60:128", help="ms:in-flight,...")
    parser.add_argument("--regions", type=int, default=8, help="boxes per region sample")
    parser.add_argument("--region-delays", default="20,60", help="ms,...")
    parser.add_argument("--rates", default="150,300", help="requests/s of the front")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child = region_child if args.child[0] == "region" else viewer_child
        print(json.dumps(asyncio.run(child(json.loads(args.child[1])))))
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.2f}, 2 cores")
    with tempfile.TemporaryDirectory(prefix="bench-field-") as tmp:
        if args.only in (None, "viewer"):
            print(
                "| round trip | in flight | reader | sample | chunks/s (median) | min-max "
                "| requests/chunk | connections opened | vs ideal warm | vs ideal same sample "
                "| same sample, paired by round | vs tensorstore |"
            )
            print("\n".join(viewer(args, Path(tmp))), flush=True)
        if args.only in (None, "region"):
            print("| round trip | reader | sample | time | requests/chunk | speed vs tensorstore |")
            print("\n".join(region(args, Path(tmp))), flush=True)
        if args.only in (None, "throttle"):
            print("| front | tool | time | requests | refused | time / needed | vs ts | equal |")
            print("\n".join(throttle(args, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
