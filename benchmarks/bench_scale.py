#!/usr/bin/env python
"""Memory and time against the number of chunks: conversions, verify and a listing.

Flat 2-d uint8 Zarr v3 arrays of 10^4, 10^5 and 10^6 chunks of 8x8 bytes (64 bytes
each: the object count grows, the bytes stay small), keys ``c/i/j`` in folders of
1,000, on local files. Each step runs in a fresh process and prints the memory it
added (peak RSS minus the RSS after imports, ``VmHWM`` reset just before the step)
and its time per chunk:

* ``list``: every key of the array through ``LocalStore.list_prefix``;
* ``ts_copy``: tensorstore's copy of the flat array into a sharded one (8x8 chunks
  per shard), its defaults otherwise: the peer's way to shard;
* ``shard_to``: ``asyncshard shard SRC 8 --to DEST`` (a sharded copy);
* ``shard``: ``asyncshard shard SRC 8`` in place (two passes: keys kept);
* ``verify``: ``asyncshard verify`` of the sharded array;
* ``unshard``: ``asyncshard unshard`` in place, back to flat.

Stores keep their defaults (``durable=True``: data synced before it is named).
Printed per step: MB added, microseconds per chunk (wall, and CPU: user + system time
of the process, what to compare on a loaded machine), voluntary context switches per
chunk ("waits": thread handoffs and lock waits, each a wait for a core under load),
and the ratios the targets ask
for: memory at the largest size over the smallest (<= 1.5), time per chunk, largest
over smallest (<= 1.2), and our time over tensorstore's at each size (<= 1.0). Run
from the repository root (10^6 takes several minutes, most of it making the files)::

    python benchmarks/bench_scale.py                   # 1e4, 1e5, 1e6
    python benchmarks/bench_scale.py --sizes 1e4,1e5   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEPS = ("list", "ts_copy", "shard_to", "shard", "verify", "unshard")
PER_FOLDER = 1000


def status(field: str) -> int:
    """A ``/proc/self/status`` memory field in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def doc(grid: tuple[int, int], codecs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [8 * g for g in grid],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs or [{"name": "bytes"}],
        "attributes": {},
    }


def make_flat(root: Path, n: int) -> None:
    """A flat array of ``n`` chunks (``n`` a multiple of :data:`PER_FOLDER`)."""
    grid = (max(1, n // PER_FOLDER), min(n, PER_FOLDER))
    root.mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps(doc(grid)))
    data = bytes(range(64))
    for i in range(grid[0]):
        folder = root / "c" / str(i)
        folder.mkdir(parents=True)
        for j in range(grid[1]):
            fd = os.open(folder / str(j), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.close(fd)


async def _list(path: str) -> int:
    from asyncshard.backends import LocalStore

    n = 0
    async for _ in LocalStore(path).list_prefix(""):
        n += 1
    return n


def ts_copy(src: str, dst: str) -> None:
    import tensorstore as ts

    source = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": src}}).result()
    shape = list(source.shape)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": dst},
        "metadata": {
            "shape": shape,
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [8, 8],
                        "codecs": [{"name": "bytes"}],
                        "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
                    },
                }
            ],
        },
        "create": True,
        "delete_existing": True,
    }
    target = ts.open(spec).result()
    target.write(source).result()


def run_step(step: str, path: str, other: str) -> dict[str, float]:
    """Child mode: one step, measured; the numbers as a dict."""
    from asyncshard.convert import shard_store_async, unshard_store_async
    from asyncshard.integrity import verify_async

    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM restarts from here
    before = status("VmRSS")
    started = time.perf_counter()
    cpu = time.process_time()
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    if step == "list":
        asyncio.run(_list(path))
    elif step == "ts_copy":
        ts_copy(path, other)
    elif step == "shard_to":
        asyncio.run(shard_store_async(path, 8, to=other))
    elif step == "shard":
        asyncio.run(shard_store_async(path, 8))
    elif step == "verify":
        report = asyncio.run(verify_async(path))
        assert report.ok, report
    elif step == "unshard":
        asyncio.run(unshard_store_async(path))
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "cpu": time.process_time() - cpu,
        "added": status("VmHWM") - before,
        "switches": resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches,
    }


def measure(step: str, path: Path, other: Path) -> dict[str, float]:
    os.sync()
    out = subprocess.run(
        [sys.executable, __file__, "--child", step, str(path), str(other)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6", help="chunk counts, comma separated")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--dir", default=None, help="where the arrays go (default: a temp folder)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_step(*args.child)))
        return
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    steps = args.steps.split(",")
    results: dict[str, dict[int, dict[str, float]]] = {s: {} for s in steps}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-scale-") as tmp:
        for n in sizes:
            flat, copy = Path(tmp) / f"flat{n}", Path(tmp) / f"copy{n}"
            started = time.perf_counter()
            make_flat(flat, n)
            print(f"# {n} chunks made in {time.perf_counter() - started:.0f} s", flush=True)
            for step in steps:
                if copy.exists():
                    shutil.rmtree(copy)
                results[step][n] = got = measure(step, flat, copy)
                print(
                    f"{step:<9} {n:>9} {got['added'] / 1e6:8.1f} MB added "
                    f"{got['seconds'] / n * 1e6:8.1f} us/chunk ({got['cpu'] / n * 1e6:.1f} CPU, "
                    f"{got['switches'] / n:.2f} waits)",
                    flush=True,
                )
            shutil.rmtree(flat)
            if copy.exists():
                shutil.rmtree(copy)
    report(results, sizes)


def report(results: dict[str, dict[int, dict[str, float]]], sizes: list[int]) -> None:
    lo, hi = sizes[0], sizes[-1]
    print(f"\nstep       MB@{lo:<8} MB@{hi:<8} mem {hi}/{lo}  us/chunk@{lo}  @{hi}  time {hi}/{lo}")
    for step, by in results.items():
        a, b = by[lo], by[hi]
        print(
            f"{step:<9} {a['added'] / 1e6:9.1f} {b['added'] / 1e6:9.1f} "
            f"{b['added'] / max(a['added'], 1):10.2f}x {a['seconds'] / lo * 1e6:12.1f} "
            f"{b['seconds'] / hi * 1e6:6.1f} {b['seconds'] / hi / (a['seconds'] / lo):9.2f}x"
        )
    if "ts_copy" in results:
        print("\nvs tensorstore's copy (time per chunk, ours / theirs; < 1 is faster)")
        for step in ("shard_to", "shard", "unshard"):
            if step in results:
                ratios = [
                    results[step][n]["seconds"] / results["ts_copy"][n]["seconds"] for n in sizes
                ]
                print(
                    f"{step:<9} "
                    + "  ".join(f"{n}: {r:.2f}x" for n, r in zip(sizes, ratios, strict=True))
                )


if __name__ == "__main__":
    main()
