"""OME-Zarr 0.4 test data written by ome-zarr-py (Zarr v2), and the checks of a 0.5 copy."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

CHANNELS = {
    "channels": [
        {
            "label": name,
            "color": color,
            "active": True,
            "window": {"start": 0, "end": 1000, "min": 0, "max": 1000},
        }
        for name, color in (("DAPI", "0000FF"), ("GFP", "00FF00"))
    ],
    "rdefs": {"model": "color"},
}


def write_image_04(
    path: Path,
    shape: tuple[int, ...] = (2, 16, 64, 64),
    chunks: tuple[int, ...] = (1, 8, 32, 32),
    *,
    labels: bool = True,
) -> np.ndarray[Any, Any]:
    """An image pyramid (c, z, y, x; uint16; 3 levels; ``chunks``) with ``omero`` and,
    with ``labels``, a ``cells`` label pyramid, as ome-zarr-py writes OME-Zarr 0.4;
    returns level 0."""
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    rng = np.random.default_rng(7)
    data = rng.integers(0, 1000, size=shape, dtype=np.uint16)
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    write_image(
        data,
        root,
        axes="czyx",
        fmt=FormatV04(),
        scaler=None,
        scale_factors=[2, 4],
        storage_options={"chunks": chunks},
    )
    root.attrs["omero"] = CHANNELS
    if not labels:
        return data
    write_labels(
        (data[0] > 500).astype(np.uint8),
        root,
        name="cells",
        axes="zyx",
        fmt=FormatV04(),
        scaler=None,
        scale_factors=[2, 4],
        storage_options={"chunks": chunks[1:]},
        label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
    )
    return data


def write_plate_04(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """An HCS plate (row A, columns 1-2, one field per well, 2 levels) as ome-zarr-py
    writes OME-Zarr 0.4; returns ``{field path: level 0}``."""
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    rng = np.random.default_rng(11)
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    wells = ["A/1", "A/2"]
    write_plate_metadata(root, ["A"], ["1", "2"], wells, fmt=FormatV04(), name="test plate")
    fields = {}
    for well in wells:
        group = root.require_group(well)
        write_well_metadata(group, ["0"], fmt=FormatV04())
        data = rng.integers(0, 255, size=(1, 32, 32), dtype=np.uint8)
        write_image(
            data,
            group.require_group("0"),
            axes="cyx",
            fmt=FormatV04(),
            scaler=None,
            scale_factors=[2],
            storage_options={"chunks": (1, 16, 16)},
        )
        fields[f"{well}/0"] = data
    return fields


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file below ``root``."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            full = Path(folder) / name
            out[full.relative_to(root).as_posix()] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def assert_same_arrays(source: Path, dest: Path) -> list[str]:
    """Every array of the v2 hierarchy at ``source`` reads equal (zarr-python) at the same
    path of ``dest``, which is sharded Zarr v3; returns the array paths."""
    import zarr

    src = zarr.open_group(str(source), mode="r", zarr_format=2)
    paths = [p for p, _ in src.arrays()] + [
        f"{g}/{p}" for g, group in src.groups() for p in _array_paths(group)
    ]
    assert paths
    for path in paths:
        a = zarr.open_array(str(source / path), mode="r", zarr_format=2)
        b = zarr.open_array(str(dest / path), mode="r", zarr_format=3)
        assert b.metadata.zarr_format == 3
        assert any(c.to_dict()["name"] == "sharding_indexed" for c in b.metadata.codecs)
        np.testing.assert_array_equal(np.asarray(a[...]), np.asarray(b[...]))
    return paths


def _array_paths(group: Any) -> list[str]:
    out = [p for p, _ in group.arrays()]
    for name, child in group.groups():
        out += [f"{name}/{p}" for p in _array_paths(child)]
    return out
