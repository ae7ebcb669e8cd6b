#!/usr/bin/env python
"""The zarrs benchmark's array shape, read by zarr-python through asyncshard and by peers.

The array of the zarrs/zarrs-python benchmarks: uint16, ``--size``^3 (1024 there; 512 by
default here, so that a round fits a 2-core machine), shards of 256^3 holding 64^3
inner chunks, each chunk ``zstd``-compressed, on local files (written once by
tensorstore). Readers, each fresh (nothing cached), in turn, ``--rounds`` rounds:

* **zarr-python**: ``zarr.open_array`` over its ``LocalStore``, its own sharding codec;
* **zarr-python + zarrs**: the same with ``codec_pipeline.path`` set to zarrs'
  ``ZarrsCodecPipeline`` (Rust; skipped with a message when ``zarrs`` is not
  installed: ``pip install zarrs``);
* **zarr-python through asyncshard**: ``zarr.open_array`` over asyncshard's
  ``ZarrStore(path, mode="inner-chunks")``: zarr-python sees 64^3 chunks, asyncshard
  reads them out of the shards (cached indexes, coalesced ranges);
* **tensorstore**: its ``zarr3`` driver, default context.

Two access patterns, as in the zarrs benchmark: **read all** (``array[...]``, one call)
and **chunk by chunk** (every 64^3 inner chunk in turn, one call each, one at a time).
Printed: median seconds, GB/s of decoded data, CPU seconds (every thread of this
process), and each reader's time over asyncshard's (above 1: asyncshard is faster). Every
read is checked against the written array.

    python benchmarks/bench_zarrs_shape.py [--size 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts
import zarr
import zarr.storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asyncshard.zarr_python import ZarrStore
from benchmarks.common import cpu_now, sharding_codec

SHARD, CHUNK = 256, 64
OURS = "zarr-python through asyncshard"


def write(path: Path, size: int) -> np.ndarray:
    """The array (a smooth field plus noise: compresses about as real images do)."""
    z, y, x = np.ogrid[:size, :size, :size]
    noise = np.random.default_rng(0).integers(0, 64, (size, size, size), dtype=np.uint16)
    data = ((z * 7 + y * 3 + x) % 4096).astype(np.uint16) + noise
    zstd = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
    codecs = [
        sharding_codec(CHUNK, [{"name": "bytes", "configuration": {"endian": "little"}}, zstd])
    ]
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": [size] * 3,
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD] * 3}},
            "codecs": codecs,
            "fill_value": 0,
        },
        "create": True,
    }
    ts.open(spec).result()[...] = data
    return data


def inner_slices(size: int) -> list[tuple[slice, ...]]:
    steps = range(0, size, CHUNK)
    return [
        (slice(z, z + CHUNK), slice(y, y + CHUNK), slice(x, x + CHUNK))
        for z in steps
        for y in steps
        for x in steps
    ]


def read_with(
    open_array: Callable[[Path], Any], path: Path, pattern: str, like: np.ndarray
) -> np.ndarray:
    array = open_array(path)
    if pattern == "read all":
        return np.asarray(array[...])
    out = np.empty_like(like)
    for sl in inner_slices(like.shape[0]):
        out[sl] = array[sl]
    return out


def zarr_python(path: Path) -> Any:
    return zarr.open_array(zarr.storage.LocalStore(str(path), read_only=True), mode="r")


def zarr_python_zarrs(path: Path) -> Any:
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        return zarr.open_array(zarr.storage.LocalStore(str(path), read_only=True), mode="r")


def through_asyncshard(path: Path) -> Any:
    return zarr.open_array(ZarrStore(str(path), mode="inner-chunks", read_only=True), mode="r")


def tensorstore(path: Path) -> Any:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec, read=True).result()


def readers() -> dict[str, Callable[[Path], Any]]:
    found: dict[str, Callable[[Path], Any]] = {
        "zarr-python": zarr_python,
        OURS: through_asyncshard,
        "tensorstore": tensorstore,
    }
    try:
        import zarrs  # noqa: F401
    except ImportError:
        print("zarrs is not installed (pip install zarrs): its row is skipped", file=sys.stderr)
    else:
        found["zarr-python + zarrs"] = zarr_python_zarrs
    return found


def run_one(
    read: Callable[[Path], Any], path: Path, pattern: str, expected: np.ndarray
) -> tuple[float, float]:
    cpu, started = cpu_now(), time.perf_counter()
    got = read_with(read, path, pattern, expected)
    seconds, cpu = time.perf_counter() - started, cpu_now() - cpu
    if not np.array_equal(got, expected):
        raise AssertionError(f"{read.__name__} read other values ({pattern})")
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=512, help="array edge (1024 in zarrs')")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--patterns", default="read all,chunk by chunk")
    args = parser.parse_args()
    if args.size % SHARD:
        raise SystemExit(f"--size must be a multiple of {SHARD}")
    patterns = args.patterns.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-zarrs-") as tmp:
        path = Path(tmp) / "array.zarr"
        expected = write(path, args.size)
        stored = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        tools = readers()
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for n in range(args.rounds):
            names = list(tools)
            names = names[n % len(names) :] + names[: n % len(names)]  # rotate the order
            for pattern in patterns:
                for name in names:
                    run = run_one(tools[name], path, pattern, expected)
                    results.setdefault((pattern, name), []).append(run)
                    print(f"  round {n + 1}: {pattern} / {name}: {run[0]:.2f} s", file=sys.stderr)
        gb = expected.nbytes / 1e9
        print(
            f"{args.size}^3 uint16 ({gb:.2f} GB decoded, {stored / 1e9:.2f} GB stored), "
            f"{SHARD}^3 shards of {CHUNK}^3 zstd chunks, local files; median of "
            f"{args.rounds} rounds; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
            f"zarr {version('zarr')}, tensorstore {version('tensorstore')}"
        )
        print(
            f"{'pattern':15} {'reader':32} {'s':>7} {'GB/s':>6} {'CPU s':>7} {'x asyncshard':>12}"
        )
        for pattern in patterns:
            ours = statistics.median(
                s for s, _ in results[(pattern, "zarr-python through asyncshard")]
            )
            for name in tools:
                runs = results[(pattern, name)]
                seconds = statistics.median(s for s, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                print(
                    f"{pattern:15} {name:32} {seconds:7.2f} {gb / seconds:6.2f} "
                    f"{cpu:7.2f} {seconds / ours:12.2f}"
                )


if __name__ == "__main__":
    main()
