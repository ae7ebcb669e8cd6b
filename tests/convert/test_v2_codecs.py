"""Zarr v2 arrays into sharded v3: codecs with a v3 twin move bytes, others re-encode,
and dtypes, fill values, orders and separators keep the data equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.convert import shard_store
from asyncshard.convert.layout import read_layout
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.shard import decode_shard
from tests.convert.helpers import read_tensorstore
from tests.convert.ome_data import tree_digest


def _v2(path: Path, data: np.ndarray[Any, Any], chunks: tuple[int, ...], **kwargs: Any) -> None:
    import zarr

    array = zarr.create_array(
        str(path), shape=data.shape, chunks=chunks, dtype=data.dtype, zarr_format=2, **kwargs
    )
    array[...] = data


def _codecs() -> dict[str, dict[str, Any]]:
    import numcodecs

    return {
        "blosc": {"compressors": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2)},
        "zstd": {"compressors": numcodecs.Zstd(level=5)},
        "gzip": {"compressors": numcodecs.GZip(level=4)},
        "none": {"compressors": None},
        "order F": {"compressors": numcodecs.Zstd(level=1), "order": "F"},
        "slashes": {
            "compressors": numcodecs.GZip(level=1),
            "chunk_key_encoding": {"name": "v2", "separator": "/"},
        },
    }


def _shard_chunks(dest: Path) -> dict[str, bytes]:
    """``{v2 chunk key: bytes}`` of every inner chunk of every shard at ``dest``."""
    doc = json.loads((dest / "zarr.json").read_text())
    layout = read_layout(doc)
    assert layout.index is not None
    out = {}
    for file in (dest / "c").rglob("*"):
        if not file.is_file():
            continue
        shard = tuple(int(p) for p in file.relative_to(dest / "c").parts)
        for pos, view in decode_shard(file.read_bytes(), layout.index).items():
            chunk = layout.grid.chunk_coords(shard, pos)
            out[".".join(map(str, chunk))] = bytes(view)
    return out


@pytest.mark.parametrize("case", list(_codecs()))
def test_mapped_codecs_move_chunk_bytes(case: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 60_000, size=(20, 30, 12), dtype=np.uint16)
    source, dest = tmp_path / "src", tmp_path / "dst"
    _v2(source, data, (8, 8, 6), **_codecs()[case])
    summary = shard_store(source, (2, 2, 2), to=dest)

    assert not summary.arrays[0].notes  # nothing re-encoded
    stored = {
        p.relative_to(source).as_posix().replace("/", "."): p.read_bytes()
        for p in source.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    assert _shard_chunks(dest) == stored  # every chunk, byte for byte
    np.testing.assert_array_equal(read_tensorstore(dest), data)
    import zarr

    np.testing.assert_array_equal(zarr.open_array(str(dest), mode="r")[...], data)


def test_codecs_without_a_v3_twin_are_re_encoded(tmp_path: Path) -> None:
    import numcodecs
    import zarr

    data = np.arange(24 * 16, dtype=">i4").reshape(24, 16)
    source = tmp_path / "src"
    _v2(source / "zlib", data, (8, 8), compressors=numcodecs.Zlib(level=3))
    _v2(
        source / "delta",
        data,
        (8, 8),
        filters=[numcodecs.Delta(dtype=">i4")],
        compressors=numcodecs.Blosc(),
        order="F",
    )
    zarr.open_group(str(source), mode="a", zarr_format=2)  # a root .zgroup
    dest = tmp_path / "dst"
    summary = shard_store(source, 2, to=dest)
    notes = {a.path: a.notes for a in summary.arrays}
    assert notes == {
        "delta": ["chunks re-encoded (filters have no v3 codecs)"],
        "zlib": ["chunks re-encoded (compressor 'zlib' has no v3 codec)"],
    }
    for report in summary.arrays:  # bytes read are the stored v2 chunks, not the re-encoded
        stored = [p for p in (source / report.path).iterdir() if not p.name.startswith(".")]
        assert report.bytes_read == sum(p.stat().st_size for p in stored)
    for name in ("zlib", "delta"):
        np.testing.assert_array_equal(read_tensorstore(dest / name), data)
        np.testing.assert_array_equal(zarr.open_array(str(dest / name), mode="r")[...], data)


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("<f4", float("nan")),
        (">f8", float("-inf")),
        (">i4", -7),
        ("|b1", True),
        ("<c8", 1 + 2j),
        ("<u8", None),
        ("|i1", 3),
    ],
)
def test_dtypes_and_fill_values(dtype: str, fill: Any, tmp_path: Path) -> None:
    import zarr

    source, dest = tmp_path / "src", tmp_path / "dst"
    array = zarr.create_array(
        str(source), shape=(10, 10), chunks=(4, 4), dtype=dtype, fill_value=fill, zarr_format=2
    )
    values = np.arange(16).reshape(4, 4).astype(dtype)
    array[4:8, 0:4] = values  # one chunk written, the others read as the fill value
    before = np.asarray(array[...])
    shard_store(source, 2, to=dest)
    after = zarr.open_array(str(dest), mode="r")
    np.testing.assert_array_equal(np.asarray(after[...]), before)
    assert np.dtype(after.dtype).newbyteorder("=") == np.dtype(dtype).newbyteorder("=")


def test_xarray_dimensions_become_dimension_names(tmp_path: Path) -> None:
    import zarr

    source = tmp_path / "src"
    root = zarr.open_group(str(source), mode="w", zarr_format=2)
    arr = root.create_array("t2m", shape=(4, 6), chunks=(2, 3), dtype="f4")
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["lat", "lon"], "units": "K"})
    root.attrs["title"] = "test"
    shard_store(source, 2, to=tmp_path / "dst")
    doc = json.loads((tmp_path / "dst" / "t2m" / "zarr.json").read_text())
    assert doc["dimension_names"] == ["lat", "lon"]
    assert doc["attributes"] == {"units": "K"}
    group = json.loads((tmp_path / "dst" / "zarr.json").read_text())
    assert group == {"zarr_format": 3, "node_type": "group", "attributes": {"title": "test"}}


def test_untranslatable_dtype_fails_before_writing(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "<U4",
        "compressor": None,
        "fill_value": "",
        "filters": None,
        "order": "C",
    }
    (source / ".zarray").write_text(json.dumps(zarray))
    before = tree_digest(source)
    with pytest.raises(InvalidMetadataError, match="dtype '<U4' is not converted"):
        shard_store(source, 2, to=tmp_path / "dst")
    assert not (tmp_path / "dst").exists()
    assert tree_digest(source) == before


async def test_the_walk_never_lists_an_array_folder(tmp_path: Path) -> None:
    """v2 chunk keys (``0.0``) sit in the array's own folder: the walk reads metadata
    objects to know an array, and lists only the group folders."""
    import zarr

    from asyncshard.backends import LocalStore
    from asyncshard.convert.hierarchy import walk_hierarchy

    root = zarr.open_group(str(tmp_path), mode="w", zarr_format=2)
    for name in ("a", "b/c"):
        arr = root.create_array(name, shape=(64, 64), chunks=(4, 4), dtype="u1")
        arr[...] = 1  # 256 chunk objects each, next to .zarray
    store = LocalStore(tmp_path)
    nodes = await walk_hierarchy(store)
    assert [(n.path, n.kind, n.zarr_format) for n in nodes] == [
        ("", "group", 2),
        ("a", "array", 2),
        ("b", "group", 2),
        ("b/c", "array", 2),
    ]
    assert store.stats.requests["list"] == 2  # the root and b: never a or b/c
