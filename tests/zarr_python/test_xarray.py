"""xarray writes and reads Datasets through ZarrStore (pass-through), local files and S3."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr
import zarr

from asyncshard.zarr_python import ZarrStore


def _dataset(rows: int, start: int = 0) -> xr.Dataset:
    values = np.arange(start * 48, (start + rows) * 48, dtype="float32").reshape(rows, 48)
    return xr.Dataset(
        {"t": (("y", "x"), values)},
        coords={"y": np.arange(start, start + rows), "x": np.arange(48) * 0.5},
        attrs={"title": "demo"},
    )


def test_to_zarr_then_open_zarr_round_trips_sharded(zarr_store: ZarrStore) -> None:
    ds = _dataset(64)
    with warnings.catch_warnings():  # xarray consolidates; zarr warns it is not in v3 (yet)
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        ds.to_zarr(zarr_store, encoding={"t": {"chunks": (8, 8), "shards": (32, 24)}})
        assert zarr.open_array(zarr_store, path="t").shards == (32, 24)
        back = xr.open_zarr(zarr_store)
        xr.testing.assert_identical(back.load(), ds)
        _dataset(16, start=64).to_zarr(zarr_store, append_dim="y")
        xr.testing.assert_identical(
            xr.open_zarr(zarr_store).load(), xr.concat([ds, _dataset(16, start=64)], dim="y")
        )


def test_xarray_through_the_inner_chunk_view(zarr_store: ZarrStore) -> None:
    ds = _dataset(64)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        ds.to_zarr(zarr_store, encoding={"t": {"chunks": (8, 8), "shards": (32, 24)}})
        view = zarr_store.with_mode("inner-chunks")  # pickles as its URL: any dask scheduler
        back = xr.open_zarr(view)  # the consolidated metadata shows the array unsharded
        assert back["t"].encoding["chunks"] == (8, 8) and back["t"].encoding.get("shards") is None
        xr.testing.assert_identical(back.load(), ds)
        more = _dataset(16, start=64)
        more.to_zarr(view, append_dim="y")  # resize mapped back, chunks merged into shards
        both = xr.concat([ds, more], dim="y")
        xr.testing.assert_identical(xr.open_zarr(view).load(), both)
        # what went through the view is ordinary sharded Zarr, consolidated metadata included
        assert zarr.open_array(zarr_store, path="t").shards == (32, 24)
        plain = xr.open_zarr(zarr_store)
        assert plain["t"].encoding["shards"] == (32, 24)
        xr.testing.assert_identical(plain.load(), both)
        # new variables written through the view are created as xarray asks (unsharded)
        _dataset(8).to_zarr(view, group="fresh")
        assert zarr.open_array(zarr_store, path="fresh/t").shards is None
        xr.testing.assert_identical(xr.open_zarr(zarr_store, group="fresh").load(), _dataset(8))
