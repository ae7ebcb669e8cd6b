"""The batched conversion path writes byte-identical objects to the per-object path.

The references are independent of asyncshard's own shard encoder: zarr-python writing
the same values straight into a sharded array (Zarr), and a shard assembled here from
the chunk files with the format's pure builder over plain per-file reads (precomputed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.convert import reshard, shard_precomputed, shard_store, unshard_store
from asyncshard.convert.layout import MANIFEST_ATTRIBUTE
from asyncshard.formats.precomputed.shard import build_shard
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale
from tests.convert.helpers import assert_readable, make_array, snapshot
from tests.convert.test_precomputed import SPEC, make_volume


def test_zarr_shards_equal_zarr_python_shards(tmp_path: Path) -> None:
    import zarr

    shape, chunks, per_shard = (70, 45, 9), (8, 8, 4), (4, 2, 3)
    data = make_array(tmp_path / "flat", shape, chunks, compressors=None)  # edge shards too
    flat = snapshot(tmp_path / "flat")
    reference = zarr.create_array(
        str(tmp_path / "ref"),
        shape=shape,
        chunks=chunks,
        shards=tuple(c * n for c, n in zip(chunks, per_shard, strict=True)),
        dtype=data.dtype,
        fill_value=0,
        compressors=None,
        chunk_key_encoding={"name": "default", "separator": "/"},  # the flat array's
    )
    reference[...] = data

    shard_store(str(tmp_path / "flat"), per_shard)
    ours = snapshot(tmp_path / "flat")
    assert ours == snapshot(tmp_path / "ref") and len(ours) > 1
    unshard_store(str(tmp_path / "flat"))
    assert snapshot(tmp_path / "flat") == flat  # and back: the original objects


def test_precomputed_shards_equal_the_reference_builder(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    make_volume(root)
    sharding = ShardingSpec.from_json(SPEC)
    scale = Scale.from_json(json.loads((root / "info").read_text())["scales"][0])
    folder = root / scale.key
    expected: dict[str, dict[int, bytes]] = {}
    for path in folder.iterdir():  # the per-object path: one plain read per chunk file
        pos = scale.parse_chunk_name(path.name)
        assert pos is not None
        chunk_id = scale.chunk_id(pos)
        shard, _ = sharding.shard_and_minishard(np.array([chunk_id], dtype=np.uint64))
        name = sharding.shard_filename(int(shard[0]))
        expected.setdefault(name, {})[chunk_id] = path.read_bytes()

    shard_precomputed(str(root), SPEC, [scale.key])
    assert snapshot(folder) == {n: build_shard(c, sharding) for n, c in expected.items()}


@pytest.mark.parametrize(
    ("encoding", "separator", "shape", "chunks"),
    [
        ("default", "/", (46, 38), (6, 6)),
        ("default", ".", (46, 38), (6, 6)),
        ("v2", ".", (46, 38), (6, 6)),
        ("v2", "/", (46, 38), (6, 6)),
        ("v2", ".", (46,), (6,)),  # 1-d v2 keys: no separator in them
    ],
)
def test_round_trip_keeps_the_key_encoding_and_the_objects(
    tmp_path: Path, encoding: str, separator: str, shape: tuple[int, ...], chunks: tuple[int, ...]
) -> None:
    """flat -> shard -> reshard (another shape) -> unshard with default arguments: every
    step keeps the array's chunk key encoding, and the end holds the original objects
    (names and bytes); ``zarr.json`` differs only by the ``nonempty_chunks`` manifest."""
    arr = tmp_path / "a"
    data = make_array(arr, shape, chunks, encoding=encoding, separator=separator)
    original, doc = snapshot(arr), _doc(arr)
    steps: list[Callable[[], object]] = [
        lambda: shard_store(str(arr), 2),
        lambda: reshard(str(arr), 3),
        lambda: unshard_store(str(arr)),
    ]
    for step in steps:
        step()
        assert _doc(arr)["chunk_key_encoding"] == doc["chunk_key_encoding"]
        assert_readable(arr, data)
    assert snapshot(arr) == original
    final = _doc(arr)
    assert len(final["attributes"].pop(MANIFEST_ATTRIBUTE)) == len(original)
    assert final == doc


def _doc(arr: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((arr / "zarr.json").read_text())
    return doc
