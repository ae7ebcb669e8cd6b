"""Consolidated metadata survives conversions: copies get it when their source had it
(describing the copy), in-place conversions keep it current; xarray opens the result
without a warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from asyncshard.convert import shard_store, unshard_store


def _dataset() -> Any:
    t = np.arange(600, dtype="f4").reshape(20, 30)
    return xr.Dataset({"t": (("y", "x"), t), "u": (("y",), np.arange(20))}, attrs={"a": 1})


def _write(ds: Any, path: Path, zarr_format: int, group: str | None = None) -> None:
    with warnings.catch_warnings():  # zarr-python: v3 consolidated metadata is not in the spec
        warnings.simplefilter("ignore")
        ds.to_zarr(
            path,
            group=group,
            zarr_format=zarr_format,
            encoding={"t": {"chunks": (5, 5)}},
            consolidated=True,
        )


def _open_quietly(path: Path, group: str | None = None) -> Any:
    """``xr.open_zarr`` with every warning an error (a missing or stale consolidated
    metadata makes xarray warn), loaded."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return xr.open_zarr(path, group=group).load()


def _root(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "zarr.json").read_text()))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_copy_of_a_consolidated_hierarchy_is_consolidated(
    tmp_path: Path, zarr_format: int
) -> None:
    ds = _dataset()
    source, dest = tmp_path / "src.zarr", tmp_path / "dest.zarr"
    _write(ds, source, zarr_format)
    summary = shard_store(source, 2, to=dest)
    assert summary.arrays_changed == ["t", "u"]

    xr.testing.assert_identical(_open_quietly(dest), ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = zarr.open_consolidated(dest)
    assert group.metadata.consolidated_metadata is not None
    for name in ("t", "u"):  # the copy's metadata (sharded), not the source's
        assert group[name].shards is not None
        consolidated = _root(dest)["consolidated_metadata"]["metadata"][name]
        assert consolidated == json.loads((dest / name / "zarr.json").read_text())
        np.testing.assert_array_equal(group[name][...], ds[name].values)

    again = shard_store(source, 2, to=dest)  # a rerun finds the consolidated root its own
    assert again.arrays_changed == [] and len(again.skipped) == 2


def test_nested_groups_are_consolidated_as_zarr_python_does(tmp_path: Path) -> None:
    ds = _dataset()
    source, dest = tmp_path / "src.zarr", tmp_path / "dest.zarr"
    _write(ds, source, 3, group="sub")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(source))  # the root's, covering sub/
    shard_store(source, 2, to=dest)
    members = _root(dest)["consolidated_metadata"]["metadata"]
    assert set(members) == {"sub", "sub/t", "sub/u"}
    assert members["sub"]["consolidated_metadata"]["metadata"] == {}
    xr.testing.assert_identical(_open_quietly(dest, "sub"), ds)
    reread = zarr.open_consolidated(dest)
    np.testing.assert_array_equal(reread["sub/t"][...], ds["t"].values)


def test_a_copy_of_an_unconsolidated_source_gets_none(tmp_path: Path) -> None:
    source, dest = tmp_path / "src.zarr", tmp_path / "dest.zarr"
    _dataset().to_zarr(source, zarr_format=2, consolidated=False)
    shard_store(source, 2, to=dest)
    assert "consolidated_metadata" not in _root(dest)


def test_in_place_conversions_keep_it_current(tmp_path: Path) -> None:
    ds = _dataset()
    path = tmp_path / "data.zarr"
    _write(ds, path, 3)
    for convert in (lambda: shard_store(path, 2), lambda: unshard_store(path)):
        assert convert().arrays_changed == ["t", "u"]
        # equal data; in place, the arrays gain their nonempty_chunks manifest attribute
        xr.testing.assert_equal(_open_quietly(path), ds)
        members = _root(path)["consolidated_metadata"]["metadata"]
        for name in ("t", "u"):
            assert members[name] == json.loads((path / name / "zarr.json").read_text())
