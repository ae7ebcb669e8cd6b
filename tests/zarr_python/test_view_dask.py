"""No lost updates: dask workers in 4 processes write overlapping-shard regions of one
sharded array through the inner-chunk view, on local files and on S3 (SeaweedFS).

The dask chunks (12x20) are aligned to the inner chunks (4x4) but not to the shards
(32x32), so every shard is written by several tasks at once from several processes.
Through the view each shard write is a conditional read-merge-write, retried on
conflict, so every value lands (``test_default_writers.py`` checks the same of
zarr-python's own sharding codec through the default, pass-through ZarrStore).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import zarr

from asyncshard.zarr_python import ZarrStore

SHAPE, SHARD, CHUNK, DASK_CHUNKS = (64, 96), (32, 32), (4, 4), (12, 20)


def test_concurrent_workers_lose_nothing(
    dask_client: Any, url_place: tuple[str, dict[str, Any]]
) -> None:
    url, options = url_place
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
    assert len(dask_client.nthreads()) == 4
