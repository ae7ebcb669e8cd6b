"""No lost updates: dask workers in 4 processes write overlapping-shard regions of one
sharded array through the inner-chunk view, on local files and on S3 (SeaweedFS).

The dask chunks (12x20) are aligned to the inner chunks (4x4) but not to the shards
(32x32), so every shard is written by several tasks at once from several processes.
Through zarr-python's own sharding codec this loses values (each task reads a shard,
changes its part and writes it back unconditionally: ``benchmarks/bench_lost_updates.py``
counts them); through the view each shard write is a conditional read-merge-write,
retried on conflict, so every value lands.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

from asyncshard.zarr_python import ZarrStore
from tests.servers.fixtures import local_dask_client

SHAPE, SHARD, CHUNK, DASK_CHUNKS = (64, 96), (32, 32), (4, 4), (12, 20)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A local cluster of 4 worker processes, one thread each (once per module)."""
    with local_dask_client(4) as dask_client:
        yield dask_client


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A URL the workers can reopen (local folder or SeaweedFS bucket) and its options."""
    if request.param == "local":
        return f"file://{tmp_path / 'root'}", {}
    url, options = request.getfixturevalue("s3_place")
    return url, options


def test_concurrent_workers_lose_nothing(client: Any, place: tuple[str, dict[str, Any]]) -> None:
    url, options = place
    ZarrStore(url, **options).create_sharded_array(
        "arr", shape=SHAPE, chunks=CHUNK, shards=SHARD, dtype="int32", fill_value=-1
    )
    view = ZarrStore(url, mode="inner-chunks", **options)  # pickles as its URL
    target = zarr.open_array(view, path="arr", mode="r+")
    x = da.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE).rechunk(DASK_CHUNKS)
    da.to_zarr(x, target)  # on the cluster (the client is the default scheduler), no lock
    written = zarr.open_array(ZarrStore(url, **options), path="arr", mode="r")
    assert written.shards == SHARD
    lost = int((written[...] != np.arange(np.prod(SHAPE)).reshape(SHAPE)).sum())
    assert lost == 0
    assert len(client.nthreads()) == 4
