#!/usr/bin/env python
"""Over-fetch of scattered small chunks read in one batch over loopback HTTP (nginx):
asyncshard now, asyncshard before the over-fetch bound (``--baseline-src``) and
tensorstore, in one run.

Dataset, written by tensorstore into a temporary folder that nginx serves: a 512^3
uint8 Zarr v3 array of 128^3 shards (64 of them) holding 16^3 inner chunks, uncompressed
(``bytes``; index ``bytes`` + ``crc32c`` at the end), random data: every inner chunk is
4 KiB. Workload: a random sample of ``--chunks`` distinct inner chunks (2,000: about 6 %
of each shard), the same for every reader of a round (each round draws its own), read in
one all-at-once batch by a fresh reader (cold: no cached index):

* ``asyncshard``: ``ZarrShardedStore.get_partial_values`` over ``open_store(http://...)``;
* ``asyncshard before``: the same code from the source tree ``--baseline-src`` (a
  worktree of the commit before the bound, e.g. ``git worktree add
  /tmp/asyncshard-before 73c08ba~1``);
* ``tensorstore``: ``zarr3`` over the ``http`` kvstore, a fresh default ``ts.Context()``,
  one ``array[box].read()`` per chunk, all awaited together.

Every reader runs in its own subprocess (asyncshard versions through ``PYTHONPATH``, so
the two never share a process). Measured per reader, from the start of the batch to its
end: chunks/s (wall time), bytes sent by nginx (``$body_bytes_sent`` summed over the
access log lines of the batch: the same measure for every reader) and requests (those
lines, ``304`` revalidations included), against the bytes needed (chunks x 4096), the
memory the batch grew the process by (peak RSS during the batch minus RSS before it:
``VmHWM`` after resetting it through ``/proc/self/clear_refs``, else ``ru_maxrss``) and
the CPU time of the reader's process (all its threads; not nginx's). Every reader runs
on the event loop ``--loop`` (uvloop by default, as asyncshard's commands; tensorstore's
futures complete through it too). Printed: each run, then medians of ``--rounds``
interleaved rounds (the order rotates), ratios to tensorstore, the load average and
versions. nginx is apt-installed if missing.

    python benchmarks/bench_overfetch.py [--chunks 2000] [--rounds 3] [--loop asyncio] \
        [--baseline-src /tmp/asyncshard-before]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks.nginx as nginx_module
from benchmarks.common import Timed, add_loop_argument, cpu_now, sharding_codec
from benchmarks.nginx import Nginx

REPO = Path(__file__).resolve().parents[1]
SHAPE = (512, 512, 512)
CHUNK = 16
SHARD = 128
GRID = tuple(s // CHUNK for s in SHAPE)  # 32 x 32 x 32 inner chunks
CHUNK_BYTES = CHUNK**3  # uint8
ARRAY = "arr"
TENSORSTORE = "tensorstore"
NOW = "asyncshard"
BEFORE = "asyncshard before"

Coords = tuple[int, int, int]
#: A reader's batch (the values it read) and how it closes (what it reports besides).
Batch = Callable[[], Awaitable[list[Any]]]
Close = Callable[[], Awaitable[dict[str, Any]]]


class SizedNginx(Nginx):
    """:class:`Nginx` whose access log ends every line with ``$body_bytes_sent``."""

    def __enter__(self) -> SizedNginx:
        plain = nginx_module.CONFIG
        sized = plain.replace("$status'", "$status $body_bytes_sent'")
        assert sized != plain, "benchmarks/nginx.py changed its log format"
        nginx_module.CONFIG = sized
        try:
            super().__enter__()
        finally:
            nginx_module.CONFIG = plain
        return self

    @property
    def access_log(self) -> Path:
        return self._prefix / "access.log"


def write_dataset(root: Path) -> None:
    data = np.random.default_rng(0).integers(0, 256, SHAPE, dtype=np.uint8)
    arr = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{root}/{ARRAY}/"},
            "metadata": {
                "shape": list(SHAPE),
                "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD] * 3}},
                "codecs": [sharding_codec(CHUNK)],
            },
            "create": True,
        }
    ).result()
    arr[...] = data


def sample(n: int, seed: int) -> list[Coords]:
    """``n`` distinct inner chunk positions."""
    x, y, z = GRID
    picks = random.Random(seed).sample(range(x * y * z), n)
    return [(i // (y * z), i // z % y, i % z) for i in picks]


# ------------------------------------------------------------------------ the child side
# One reader in a fresh process: open, then time one batch, then report JSON on stdout.


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


class PeakMemory:
    """Peak RSS grown over a stretch of code (KiB)."""

    def __init__(self) -> None:
        gc.collect()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            self.method = "VmHWM"
        except OSError:
            self.method = "ru_maxrss"
        self.rss = rss_kib("VmRSS")
        self.maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def grown(self) -> int:
        if self.method == "VmHWM":
            return rss_kib("VmHWM") - self.rss
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.maxrss


def read_log(path: Path, offset: int) -> tuple[int, int, dict[str, int]]:
    """Requests (lines), body bytes and the count of each status of the log after ``offset``."""
    with path.open("rb") as f:
        f.seek(offset)
        lines = [line.split() for line in f.read().decode().splitlines()]
    statuses = Counter(fields[-2] for fields in lines)
    return len(lines), sum(int(fields[-1]) for fields in lines), dict(statuses)


async def child_asyncshard(url: str, coords: list[Coords]) -> tuple[Batch, Close]:
    import asyncshard
    from asyncshard import open_store
    from asyncshard.cache import LoadingCache
    from asyncshard.sharding import ZarrShardedStore

    http = open_store(url + "/")
    store = await ZarrShardedStore.open(http, ARRAY, cache=LoadingCache())
    keys = [f"{ARRAY}/c/{x}/{y}/{z}" for x, y, z in coords]

    async def batch() -> list[Any]:
        return await store.get_partial_values([(key, None) for key in keys])

    async def close() -> dict[str, Any]:
        extra = {
            "module": asyncshard.__file__,
            "max_gap": http.max_gap,
            "store_bytes_fetched": http.stats.bytes_fetched,
        }
        await store.close()
        return extra

    return batch, close


async def child_tensorstore(url: str, coords: list[Coords]) -> tuple[Batch, Close]:
    arr = await ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": f"{url}/{ARRAY}/"}},
        read=True,
        context=ts.Context(),
    )
    boxes = [tuple(slice(v * CHUNK, (v + 1) * CHUNK) for v in c) for c in coords]

    async def batch() -> list[Any]:
        return list(await asyncio.gather(*(arr[box].read() for box in boxes)))

    async def close() -> dict[str, Any]:
        return {}

    return batch, close


async def child(reader: str, url: str, log: Path, coords: list[Coords]) -> dict[str, Any]:
    opener = child_tensorstore if reader == TENSORSTORE else child_asyncshard
    batch, close = await opener(url, coords)
    await asyncio.sleep(0.1)  # nginx logs a request when it is done
    offset = log.stat().st_size
    memory = PeakMemory()
    cpu, start = cpu_now(), time.perf_counter()
    values = await batch()
    seconds, cpu = time.perf_counter() - start, cpu_now() - cpu
    grown = memory.grown()
    await asyncio.sleep(0.1)
    requests, sent, statuses = read_log(log, offset)
    got = sum(1 for v in values if v is not None)
    if got != len(coords):
        raise RuntimeError(f"{reader}: {got} of {len(coords)} chunks")
    return {
        "seconds": seconds,
        "cpu": cpu,
        "requests": requests,
        "sent": sent,
        "grown_kib": grown,
        "memory": memory.method,
        "statuses": statuses,
        **(await close()),
    }


# ----------------------------------------------------------------------- the parent side


@dataclass
class Run(Timed):
    sent: int
    requests: int
    grown_kib: int

    @property
    def needed(self) -> int:
        return self.chunks * CHUNK_BYTES


def asyncshard_path(tree: Path) -> Path:
    """The folder to put on ``PYTHONPATH`` for a source tree (its ``src/``, or itself)."""
    return tree / "src" if (tree / "src" / "asyncshard").is_dir() else tree


def run_reader(
    reader: str, src: Path, server: SizedNginx, coords_file: Path, n: int, loop: str
) -> tuple[Run, dict[str, Any]]:
    command = [sys.executable, __file__, "--child", reader, "--url", server.url]
    command += ["--log", str(server.access_log), "--coords", str(coords_file)]
    command += ["--loop", loop]
    env = {**os.environ, "PYTHONPATH": str(asyncshard_path(src))}
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{reader} failed:\n{out.stderr}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return Run(n, got["seconds"], got["cpu"], got["sent"], got["requests"], got["grown_kib"]), got


def commit(tree: Path) -> str:
    """``tree``'s commit, noting uncommitted changes under ``src/``."""
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    clean = subprocess.run(["git", "-C", str(tree), "diff", "--quiet", "HEAD", "--", "src"])
    return head if clean.returncode == 0 else f"{head} + uncommitted changes in src/"


def versions(trees: dict[str, Path]) -> str:
    parts = [
        f"python {platform.python_version()}",
        f"tensorstore {importlib.metadata.version('tensorstore')}",
        f"obstore {importlib.metadata.version('obstore')}",
    ]
    parts += [f"{name} {commit(tree)}" for name, tree in trees.items()]
    return ", ".join(parts)


def report(results: dict[str, list[Run]], args: argparse.Namespace, loads: list[str]) -> None:
    def med(reader: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in results[reader])

    print(
        f"\n{SHAPE[0]}^3 uint8, {SHARD}^3 shards of {CHUNK}^3 inner chunks ({CHUNK_BYTES} B), "
        f"{args.chunks} random chunks in one batch, cold, loopback HTTP (nginx), "
        f"median of {args.rounds} rounds, {os.cpu_count()} CPUs, {args.loop} event loop"
    )
    print("load average (/proc/loadavg) before and after: " + " | ".join(loads))
    head = ("reader", "chunks/s", "MB sent", "sent/need", "requests", "mem MB", "x rate", "x mem")
    head += ("CPU-ms/chunk",)
    print("{:18} {:>9} {:>8} {:>9} {:>8} {:>7} {:>7} {:>6} {:>12}".format(*head))
    ref_rate, ref_mem = med(TENSORSTORE, "rate"), med(TENSORSTORE, "grown_kib")
    for reader in results:
        rate, sent, mem = med(reader, "rate"), med(reader, "sent"), med(reader, "grown_kib")
        need = results[reader][0].needed
        print(
            f"{reader:18} {rate:9.0f} {sent / 1e6:8.1f} {sent / need:9.2f} "
            f"{med(reader, 'requests'):8.0f} {mem / 1024:7.1f} {rate / ref_rate:6.2f}x "
            f"{mem / ref_mem:5.2f}x {med(reader, 'cpu_ms'):12.3f}"
        )


def main(args: argparse.Namespace) -> None:
    trees = {NOW: REPO}
    if args.baseline_src:
        before = Path(args.baseline_src).resolve()
        if not (asyncshard_path(before) / "asyncshard").is_dir():
            raise SystemExit(
                f"no asyncshard source under {before}: create it with "
                f"git -C {REPO} worktree add {before} 73c08ba~1"
            )
        trees[BEFORE] = before
    readers = [*trees, TENSORSTORE]
    loads = [Path("/proc/loadavg").read_text().strip()]
    results: dict[str, list[Run]] = {reader: [] for reader in readers}
    with tempfile.TemporaryDirectory(prefix="asyncshard-overfetch-") as tmp:
        write_dataset(Path(tmp))
        with SizedNginx(tmp) as server:
            for r in range(args.rounds):
                coords_file = Path(tmp) / f"coords-{r}.json"
                coords_file.write_text(json.dumps(sample(args.chunks, r)))
                order = readers[r % len(readers) :] + readers[: r % len(readers)]
                for reader in order:
                    src = trees.get(reader, REPO)
                    run, got = run_reader(reader, src, server, coords_file, args.chunks, args.loop)
                    results[reader].append(run)
                    where = got.get("module", "")
                    if where and not where.startswith(str(asyncshard_path(src))):
                        raise RuntimeError(f"{reader} imported {where}, not {src}")
                    extra = (
                        f", max_gap {got['max_gap']}, store bytes_fetched "
                        f"{got['store_bytes_fetched'] / 1e6:.1f} MB"
                        if where
                        else ""
                    )
                    print(
                        f"round {r + 1} {reader:18} {run.rate:7.0f} chunks/s "
                        f"{run.cpu_ms:6.3f} CPU-ms/chunk "
                        f"{run.sent / 1e6:6.1f} MB sent {run.requests:5d} requests "
                        f"{run.grown_kib / 1024:6.1f} MB grown ({got['memory']}), "
                        f"status {got['statuses']}{extra}",
                        flush=True,
                    )
    loads.append(Path("/proc/loadavg").read_text().strip())
    report(results, args, loads)
    print(versions(trees))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline-src",
        help="also read with the asyncshard of this source tree (a worktree of the commit "
        "before the over-fetch bound, or its src/), in its own processes",
    )
    add_loop_argument(parser, "the event loop every reader runs on")
    # one reader in this process (the parent starts these)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--coords", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.child:
        coords = [tuple(c) for c in json.loads(Path(parsed.coords).read_text())]
        # uvloop directly: the --baseline-src tree may predate asyncshard.loops
        run_on_loop = uvloop.run if parsed.loop == "uvloop" else asyncio.run
        got = run_on_loop(child(parsed.child, parsed.url, Path(parsed.log), coords))
        print(json.dumps(got))
    else:
        main(parsed)
