"""``SHAPE auto``: shard shapes from a target shard size, per array."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.convert import shard_store
from asyncshard.convert.autoshape import (
    DEFAULT_SHARD_BYTES,
    auto_chunks_per_shard,
    auto_for_document,
    itemsize_of,
)
from asyncshard.convert.command import shard
from tests.convert.helpers import assert_readable, make_array


def test_shards_grow_isotropically_up_to_the_target() -> None:
    # 32^3 uint8 chunks (32 KiB): 64 MiB is 2048 chunks, 8 x 16 x 16 (ties: last axes first)
    cps = auto_chunks_per_shard((4096,) * 3, (32,) * 3, 1)
    assert math.prod(cps) * 32**3 == DEFAULT_SHARD_BYTES and sorted(cps) == [8, 16, 16]
    # anisotropic chunks: the axis with the smallest shard extent grows first
    cps = auto_chunks_per_shard((4096, 4096, 4096), (8, 64, 64), 2, 2**20)  # 16 chunks
    assert [c * s for c, s in zip(cps, (8, 64, 64), strict=True)] == [64, 64, 128]


def test_small_levels_get_one_shard_and_fixed_axes_stay_one_chunk() -> None:
    assert auto_chunks_per_shard((100, 100), (32, 32), 1) == (4, 4)  # the whole grid
    fixed = frozenset({0, 1})
    cps = auto_chunks_per_shard((10, 3, 512, 512), (1, 1, 64, 64), 2, 2**20, fixed)
    assert cps == (1, 1, 8, 8)  # the whole 8 x 8 plane (512 KiB) of one time and channel
    doc = {"shape": [10, 3, 64, 512, 512], "data_type": "uint16"}
    doc["dimension_names"] = ["t", "c", "z", "y", "x"]
    cps = auto_for_document(doc, (1, 1, 16, 64, 64), 2**22)
    assert cps[:2] == (1, 1) and math.prod(cps) * 16 * 64 * 64 * 2 <= 2**22


@given(
    shape=st.lists(st.integers(1, 5000), min_size=1, max_size=4),
    target=st.integers(1, 2**28),
    itemsize=st.sampled_from([1, 2, 4, 8]),
)
def test_auto_shapes_respect_the_target_and_the_grid(
    shape: list[int], target: int, itemsize: int
) -> None:
    chunks = [max(1, s // 3) for s in shape]
    cps = auto_chunks_per_shard(shape, chunks, itemsize, target)
    grid = [-(-s // c) for s, c in zip(shape, chunks, strict=True)]
    assert all(1 <= c < 2 * g for c, g in zip(cps, grid, strict=True))
    assert math.prod(cps) == 1 or math.prod(cps) * math.prod(chunks) * itemsize <= target


def test_itemsizes() -> None:
    assert [itemsize_of(t) for t in ("uint8", "int16", "float32", "complex128", "bool")] == [
        1,
        2,
        4,
        16,
        1,
    ]
    assert itemsize_of("r24") == 3 and itemsize_of({"name": "struct"}) == 1


def test_shard_auto_from_python_and_the_command(tmp_path: Path) -> None:
    arr = tmp_path / "vol" / "arr"
    data = make_array(arr, (64, 48), (8, 8))  # uint16 chunks of 128 bytes, grid 8 x 6
    shard_store(str(tmp_path / "vol"), "auto", shard_bytes=4096)  # 32 chunks per shard
    doc = json.loads((arr / "zarr.json").read_text())
    cps = auto_chunks_per_shard((64, 48), (8, 8), 2, 4096)
    assert math.prod(cps) == 32
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [8 * c for c in cps]
    assert_readable(arr, data)
    result = CliRunner().invoke(shard, [str(tmp_path / "vol"), "auto", "-q"])
    assert result.exit_code == 0, result.output  # 64 MiB: one shard holds the whole array
    doc = json.loads((arr / "zarr.json").read_text())
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [64, 64]
    assert_readable(arr, data)
    bad = CliRunner().invoke(shard, [str(tmp_path / "vol"), "auto", "--shard-bytes", "x"])
    assert bad.exit_code == 2 and "not a size" in bad.output
    with pytest.raises(ValueError, match="'auto'"):
        shard_store(str(tmp_path / "vol"), "big")  # type: ignore[arg-type]
