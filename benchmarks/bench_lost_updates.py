#!/usr/bin/env python
"""Lost updates: dask workers writing one sharded array, zarr-python's codec vs the view.

``--workers`` dask worker processes (one thread each) store a dask array into a sharded
Zarr array whose dask chunks are aligned to the inner chunks but not to the shards, so
several tasks write every shard at the same time:

* **zarr-python** (``ZarrStore`` pass-through, the default: zarr-python's own sharding
  codec): each task reads the shard, changes its part and writes the shard back; the
  store makes that write conditional on the version read and, on a conflict, merges the
  chunks the task changed onto the current shard (written back unconditionally, as
  zarr-python's own stores do, concurrent tasks would overwrite each other's chunks:
  zarr-python issues #3682, #3514, #3683);
* **view** (``ZarrStore(mode="inner-chunks")``): zarr-python writes inner chunks; each
  shard write is a conditional read-merge-write, retried on conflict.

Printed per backend (local files; moto S3 on loopback) and writer: the values lost (the
array is read back and compared) in each round, and the median seconds per round.
The tests ``tests/zarr_python/test_default_writers.py`` and ``test_view_dask.py`` assert
0 for both on a smaller array.
Run from the repository root::

    python benchmarks/bench_lost_updates.py [--workers 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers

from asyncshard.zarr_python import ZarrStore
from tests.servers.s3 import start_moto

SHAPE, SHARD, CHUNK, DASK_CHUNKS = (128, 192), (32, 32), (4, 4), (12, 20)
WRITERS = {"zarr-python": "pass-through", "view": "inner-chunks"}


def one_round(url: str, options: dict[str, Any], mode: str) -> tuple[int, float]:
    """Store the array once through ``mode``; return the values lost and the seconds."""
    ZarrStore(url, **options).create_sharded_array(
        "arr", shape=SHAPE, chunks=CHUNK, shards=SHARD, dtype="int32", fill_value=-1
    )
    target = zarr.open_array(ZarrStore(url, mode=mode, **options), path="arr", mode="r+")  # type: ignore[arg-type]
    x = da.arange(int(np.prod(SHAPE)), dtype="int32").reshape(SHAPE).rechunk(DASK_CHUNKS)
    start = time.perf_counter()
    da.store(x, target, lock=False)
    elapsed = time.perf_counter() - start
    back = zarr.open_array(ZarrStore(url, **options), path="arr", mode="r")[...]
    lost = int((back != np.arange(int(np.prod(SHAPE))).reshape(SHAPE)).sum())
    return lost, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)
    from distributed import Client, LocalCluster

    server = start_moto()
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            ) as cluster,
            Client(cluster),
        ):
            places = {
                "local files": (lambda: (f"file://{tmp}/{uuid.uuid4().hex}", {})),
                "moto S3": (lambda: (f"s3://{server.bucket}/{uuid.uuid4().hex}", server.options())),
            }
            n = int(np.prod(SHAPE))
            print(
                f"{args.workers} worker processes store a {SHAPE} int32 array ({n} values), "
                f"dask chunks {DASK_CHUNKS}, inner chunks {CHUNK}, shards {SHARD}; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            print(f"{'backend':<12} {'writer':<12} {'values lost per round':<28} {'s/round':>8}")
            for backend, place in places.items():
                for writer, mode in WRITERS.items():
                    results = [one_round(*place(), mode) for _ in range(args.rounds)]
                    lost = ", ".join(str(lost) for lost, _ in results)
                    seconds = statistics.median(t for _, t in results)
                    print(f"{backend:<12} {writer:<12} {lost:<28} {seconds:>8.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
