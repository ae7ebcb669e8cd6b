"""The inner-chunk view and other writers: tensorstore reads what zarr-python wrote
through the view, the view updates tensorstore's arrays without respelling their
sharding, and precomputed volumes refuse what cannot be written back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

from asyncshard.backends import LocalStore
from asyncshard.errors import UnsupportedOperationError
from asyncshard.server.demo import PRECOMPUTED_PATH, SCALE_KEY, write_demo
from asyncshard.views import UnshardedView
from asyncshard.zarr_python import ZarrStore


def _ts_read(path: Path) -> np.ndarray:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{path}/"}}
    return np.asarray(ts.open(spec, read=True).result().read().result())


def test_tensorstore_reads_what_zarr_python_wrote_through_the_view(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ZarrStore(str(root)).create_sharded_array(
        "arr", shape=(40, 56), chunks=(4, 8), shards=(16, 16), dtype="int16", fill_value=-1
    )
    arr = zarr.open_array(ZarrStore(str(root), mode="inner-chunks"), path="arr", mode="r+")
    values = np.random.default_rng(1).integers(-1000, 1000, (33, 50), dtype="int16")
    arr[5:38, 3:53] = values
    expected = np.full((40, 56), -1, "int16")
    expected[5:38, 3:53] = values
    np.testing.assert_array_equal(_ts_read(root / "arr"), expected)


def test_the_view_keeps_tensorstores_spelling(tmp_path: Path) -> None:
    path = tmp_path / "ts"
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": f"{path}/"},
        "metadata": {
            "shape": [32, 32],
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [4, 4],
                        "codecs": [{"name": "bytes"}, {"name": "zstd"}],
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                    },
                }
            ],
        },
    }
    ts.open(spec, create=True).result().write(np.full((32, 32), 9, "uint8")).result()
    before = json.loads((path / "zarr.json").read_bytes())
    arr = zarr.open_array(ZarrStore(str(tmp_path), mode="inner-chunks"), path="ts", mode="r+")
    assert arr.chunks == (4, 4) and arr.shards is None
    arr.attrs["by"] = "zarr-python"
    arr[0:4, 0:4] = 1
    after = json.loads((path / "zarr.json").read_bytes())
    assert after == {**before, "attributes": {"by": "zarr-python"}}  # nothing else respelled
    expected = np.full((32, 32), 9, "uint8")
    expected[0:4, 0:4] = 1
    np.testing.assert_array_equal(_ts_read(path), expected)


async def test_precomputed_volumes_refuse_what_cannot_map_back(tmp_path: Path) -> None:
    await write_demo(tmp_path)
    view = UnshardedView(LocalStore(tmp_path), writable=True, list_chunks=True)
    info_key = f"{PRECOMPUTED_PATH}/info"
    info = await view.get(info_key)
    assert info is not None and "sharding" not in json.loads(bytes(info))["scales"][0]
    with pytest.raises(UnsupportedOperationError, match="precomputed volume"):
        await view.set(info_key, info)
    with pytest.raises(UnsupportedOperationError, match="shard file"):
        await view.set(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0.shard", b"x")
    with pytest.raises(UnsupportedOperationError, match="shard file"):
        await view.erase_values([f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0.shard"])
    chunk_key = f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0-32_0-32_0-32"
    chunk = await view.get(chunk_key)
    assert chunk is not None
    await view.set(chunk_key, bytes(len(chunk)))  # chunks by name are written into shards
    assert await view.get(chunk_key) == bytes(len(chunk))
    assert await LocalStore(tmp_path).get(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0-32_0-32_0-32") is None
