"""Dask stores arrays through ZarrStore (pass-through): every value lands.

Tasks write whole zarr chunks (unsharded) or whole shards (chunks aligned to shards),
several at a time on the threaded scheduler, so no two tasks touch one object.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import zarr

from asyncshard.zarr_python import ZarrStore


def test_dask_stores_every_value(zarr_store: ZarrStore) -> None:
    x = da.random.default_rng(1).integers(0, 1000, size=(96, 80), chunks=(32, 40))
    expected = x.compute()
    with dask.config.set(scheduler="threads", num_workers=4):
        da.to_zarr(x, zarr_store, component="plain")
        sharded = zarr.create_array(
            zarr_store,
            name="sharded",
            shape=x.shape,
            chunks=(8, 8),
            shards=(32, 40),
            dtype=x.dtype,
        )
        da.store(x, sharded, lock=False)
    for path in ("plain", "sharded"):
        np.testing.assert_array_equal(zarr.open_array(zarr_store, path=path)[...], expected)
    assert zarr.open_array(zarr_store, path="plain").chunks == (32, 40)
