#!/usr/bin/env python
"""Converting a flat local Zarr array to sharded and back: throughput and peak memory.

A flat uint8 array of ``--size`` bytes (default 1 GiB) with uncompressed ``--chunk``^3
chunks (default 64^3 = 256 KiB) is written to a temporary folder. Then, through the
same :class:`LocalStore` settings (fsync on every write unless ``--no-fsync``):

* **copy**: every chunk object read and written under a new key (the plain copy of the
  same bytes, through the Store API, ``--in-flight`` groups of one shard's worth of
  chunks at a time), and ``shutil.copytree`` for reference (OS-level copy);
* **shard**: ``shard_store_async(.., --shard)``, flat -> sharded;
* **unshard**: ``unshard_store_async``, back to flat.

Printed: the best of ``--repeat`` rounds (default 2; the disk's speed varies) in seconds,
MB/s and the ratio of each row's throughput to the Store copy.
Dirty pages are flushed (``os.sync``) before each timed step so that one step's
writeback does not slow the next; the data stays in the page cache (no cache dropping).

Memory: each conversion is also run in a fresh subprocess with ``tracemalloc`` (peak
Python allocations: chunk and shard buffers) and the peak resident set size (``VmHWM``
reset just before the conversion, minus the RSS then), for ``--in-flight`` 1, 2 and 4
(or ``--memory-in-flight``), next to ``in_flight x shard size``. Run from the repository
root::

    python benchmarks/bench_convert_memory.py          # 1 GiB, about a minute
    python benchmarks/bench_convert_memory.py --size 256M --no-fsync
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from asyncshard.backends import LocalStore
from asyncshard.convert import shard_store_async, unshard_store_async

MiB = 2**20


def parse_size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_flat(root: Path, size: int, chunk: int) -> tuple[int, int]:
    """A flat uint8 array of about ``size`` bytes; returns (chunks, bytes)."""
    chunk_bytes = chunk**3
    per_plane = 16 * 16
    grid = (max(1, math.ceil(size / (chunk_bytes * per_plane))), 16, 16)
    shape = [g * chunk for g in grid]
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk] * 3}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    root.mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps(doc))
    pool = np.random.default_rng(0).integers(0, 256, 2 * chunk_bytes, dtype=np.uint8).tobytes()
    n = 0
    for i in range(grid[0]):
        for j in range(grid[1]):
            folder = root / "c" / str(i) / str(j)
            folder.mkdir(parents=True)
            for k in range(grid[2]):
                offset = (n * 7919) % chunk_bytes
                (folder / str(k)).write_bytes(pool[offset : offset + chunk_bytes])
                n += 1
    return n, n * chunk_bytes


async def store_copy(src: Path, dst: Path, group: int, in_flight: int, durable: bool) -> None:
    """Copy every chunk through the Store API, ``in_flight`` groups of ``group`` at once."""
    source, target = LocalStore(src, durable=durable), LocalStore(dst, durable=durable)
    keys = [k async for k in source.list_prefix("c/")]
    groups = [keys[i : i + group] for i in range(0, len(keys), group)]
    limit = asyncio.Semaphore(in_flight)

    async def copy(members: list[str]) -> None:
        async with limit:
            values = await source.get_partial_values([(k, None) for k in members])
            await asyncio.gather(
                *(target.set(k, v) for k, v in zip(members, values, strict=True) if v)
            )

    await asyncio.gather(*(copy(g) for g in groups))


def timed(label: str, seconds: float, nbytes: int, base: float | None) -> float:
    rate = nbytes / seconds / 1e6
    ratio = "" if base is None else f"  {rate / base:5.2f}x copy"
    print(f"{label:<28} {seconds:7.2f} s  {rate:8.1f} MB/s{ratio}")
    return rate


def status(field: str) -> int:
    """A ``/proc/self/status`` memory field in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    """Make VmHWM restart from the current RSS (Linux >= 4.0)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def measure(path: str, what: str, shard: int, in_flight: int, durable: bool) -> None:
    """Subprocess mode: one conversion under tracemalloc; print the peaks as JSON."""
    store = LocalStore(path, durable=durable)
    reset_peak_rss()
    baseline = status("VmRSS")
    tracemalloc.start()
    started = time.perf_counter()
    if what == "shard":
        asyncio.run(shard_store_async(store, shard, max_in_flight=in_flight, manifest=False))
    else:
        asyncio.run(unshard_store_async(store, max_in_flight=in_flight, manifest=False))
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = status("VmHWM") - baseline
    print(json.dumps({"traced_peak": peak, "rss_peak": rss, "s": seconds}))


def run_measure(path: Path, what: str, shard: int, in_flight: int, durable: bool) -> Any:
    args = [
        sys.executable,
        __file__,
        "--measure",
        what,
        str(path),
        "--shard",
        str(shard),
        "--in-flight",
        str(in_flight),
    ] + ([] if durable else ["--no-fsync"])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=2**30, help="array bytes (1G)")
    parser.add_argument("--chunk", type=int, default=64, help="chunk edge (64: 256 KiB)")
    parser.add_argument("--shard", type=int, default=4, help="chunks per shard per axis (4)")
    parser.add_argument("--in-flight", type=int, default=4, help="shards in flight (4)")
    parser.add_argument("--memory-in-flight", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--no-fsync", dest="durable", action="store_false")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best is kept (2)")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (a temp dir)")
    parser.add_argument("--measure", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[1], args.measure[0], args.shard, args.in_flight, args.durable)
        return

    work = Path(tempfile.mkdtemp(prefix="bench-convert-", dir=args.dir))
    try:
        flat = work / "flat"
        started = time.perf_counter()
        nchunks, nbytes = make_flat(flat, args.size, args.chunk)
        shard_bytes = args.chunk**3 * args.shard**3
        print(
            f"{nbytes / 2**30:.2f} GiB flat array: {nchunks} chunks of {args.chunk**3 // 1024} "
            f"KiB; shards of {args.shard}^3 chunks = {shard_bytes / MiB:.0f} MiB; "
            f"in flight {args.in_flight}; fsync {'on' if args.durable else 'off'} "
            f"(written in {time.perf_counter() - started:.1f} s)"
        )
        store = LocalStore(flat, durable=args.durable)
        best: dict[str, float] = {}

        def step(label: str, run: Any) -> None:
            os.sync()
            started = time.perf_counter()
            run()
            elapsed = time.perf_counter() - started
            best[label] = min(best.get(label, elapsed), elapsed)

        def convert(what: str) -> None:
            if what == "shard":
                coro = shard_store_async(store, args.shard, max_in_flight=args.in_flight)
            else:
                coro = unshard_store_async(store, max_in_flight=args.in_flight)
            assert asyncio.run(coro).chunks_moved == nchunks

        group = args.shard**3
        for _ in range(args.repeat):
            step(
                "copy (Store API)",
                lambda: asyncio.run(
                    store_copy(flat, work / "copy", group, args.in_flight, args.durable)
                ),
            )
            shutil.rmtree(work / "copy")
            step("copy (shutil.copytree)", lambda: shutil.copytree(flat, work / "copy"))
            shutil.rmtree(work / "copy")
            step("shard (flat -> sharded)", lambda: convert("shard"))
            step("unshard (sharded -> flat)", lambda: convert("unshard"))
        base = None
        for label, seconds in best.items():
            rate = timed(label, seconds, nbytes, base)
            base = rate if base is None else base

        print(f"\npeak memory (fresh process each; shard = {shard_bytes / MiB:.0f} MiB)")
        print(f"{'conversion':<10} {'in flight':>9} {'x shard':>9} {'traced':>9} {'RSS':>9}")
        for in_flight in args.memory_in_flight:
            for what in ("shard", "unshard"):
                got = run_measure(flat, what, args.shard, in_flight, args.durable)
                print(
                    f"{what:<10} {in_flight:>9} {in_flight * shard_bytes / MiB:>7.0f} M "
                    f"{got['traced_peak'] / MiB:>7.0f} M {got['rss_peak'] / MiB:>7.0f} M"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
