"""Precomputed scales: unsharded <-> sharded, with tensorstore as the reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncshard.backends import LocalStore
from asyncshard.convert import (
    default_sharding,
    shard_precomputed,
    shard_precomputed_async,
    unshard_precomputed,
)
from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.formats.precomputed.shard import shard_index_nbytes
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo
from tests.convert.helpers import Crash, CrashingStore, snapshot

SCALES = [
    ("1_1_1", [40, 30, 20], [8, 8, 8], [3, -2, 0]),
    ("2_2_2", [20, 15, 10], [4, 4, 4], [1, -1, 0]),
]


def make_volume(root: Path) -> dict[str, np.ndarray[Any, Any]]:
    """An unsharded two-scale volume written by tensorstore; returns each scale's values."""
    out = {}
    for i, (key, size, chunk, offset) in enumerate(SCALES):
        spec: dict[str, Any] = {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(root)},
            "scale_metadata": {
                "key": key,
                "size": size,
                "chunk_size": chunk,
                "encoding": "raw",
                "voxel_offset": offset,
                "resolution": [2.0**i] * 3,
            },
            "create": True,
        }
        if i == 0:
            spec["multiscale_metadata"] = {
                "type": "image",
                "data_type": "uint16",
                "num_channels": 1,
            }
        store = ts.open(spec).result()
        data = np.random.default_rng(i).integers(1, 60000, size=store.shape, dtype=np.uint16)
        data[:, : chunk[1]] = 0  # a slab of fill chunks that tensorstore does not store
        store.write(data).result()
        out[key] = data
    return out


def read_scale(root: Path, index: int) -> np.ndarray[Any, Any]:
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(root)},
        "scale_index": index,
    }
    return np.asarray(ts.open(spec, read=True).result().read().result())


def assert_volume(root: Path, expected: dict[str, np.ndarray[Any, Any]]) -> None:
    for i, (key, *_) in enumerate(SCALES):
        np.testing.assert_array_equal(read_scale(root, i), expected[key])


def info(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "info").read_text())
    return doc


SPEC = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 1,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 2,
    "shard_bits": 2,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}


@pytest.mark.parametrize("sharding", [None, SPEC])  # None: chosen from each scale's size
def test_round_trip(tmp_path: Path, sharding: dict[str, Any] | None) -> None:
    root = tmp_path / "vol"
    expected = make_volume(root)
    original = snapshot(root, skip=("info",))
    original_info = info(root)

    summary = shard_precomputed(str(root), sharding)
    assert summary.arrays_changed == ["1_1_1", "2_2_2"]
    assert summary.chunks_moved == len(original)
    files = snapshot(root, skip=("info",))
    assert all(name.endswith(".shard") for name in files)
    assert sum(a.shards for a in summary.arrays) == len(files)  # the shards written
    lines = str(summary).splitlines()
    assert lines[0].startswith("1_1_1: precomputed, unsharded → sharded: ")
    assert lines[-1].startswith(f"Total: 2 scales converted in place at file://{root}; ")
    assert all("sharding" in s for s in info(root)["scales"])
    assert_volume(root, expected)
    assert shard_precomputed(str(root), sharding).arrays_changed == []  # idempotent

    unshard_precomputed(str(root))
    assert snapshot(root, skip=("info",)) == original  # gzip undone: the same bytes
    assert info(root) == original_info
    assert_volume(root, expected)
    assert unshard_precomputed(str(root)).skipped == [
        ("1_1_1", "already unsharded"),
        ("2_2_2", "already unsharded"),
    ]


def test_selected_scale_and_reasons(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    make_volume(root)
    summary = shard_precomputed(str(root), scales=["2_2_2"])
    assert summary.arrays_changed == ["2_2_2"]
    assert "sharding" not in info(root)["scales"][0]
    other = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "identity",
        "minishard_bits": 0,
        "shard_bits": 0,
    }
    assert shard_precomputed(str(root), other, ["2_2_2"]).skipped == [
        ("2_2_2", "sharded with another spec: unshard it first")
    ]


async def test_interrupted_then_resumed(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    expected = make_volume(root)
    with pytest.raises(Crash):
        await shard_precomputed_async(
            CrashingStore(LocalStore(root), puts=2, match=lambda k: k.endswith(".shard")),
            SPEC,
            scales=["1_1_1"],
            max_in_flight=1,
        )
    assert (root / "1_1_1" / JOURNAL_NAME).exists()
    assert_volume(root, expected)  # still unsharded, complete
    summary = await shard_precomputed_async(LocalStore(root), SPEC, scales=["1_1_1"])
    assert summary.arrays[0].resumed and summary.arrays[0].objects_written == 2
    assert_volume(root, expected)
    assert not (root / "1_1_1" / JOURNAL_NAME).exists()
    with pytest.raises(Crash):  # now crash while deleting the chunk files
        await shard_precomputed_async(CrashingStore(LocalStore(root), deletes=3), SPEC)
    assert_volume(root, expected)  # switched: the shards are complete
    await shard_precomputed_async(LocalStore(root), SPEC)
    assert all(n.endswith(".shard") for n in snapshot(root / "2_2_2"))
    assert_volume(root, expected)


@settings(max_examples=100, deadline=None)
@given(
    size=st.tuples(*[st.integers(1, 100_000)] * 3),
    chunk=st.tuples(*[st.sampled_from([1, 8, 32, 64, 128, 256])] * 3),
    dtype=st.sampled_from(["uint8", "uint16", "uint64"]),
)
def test_default_sharding(size: tuple[int, ...], chunk: tuple[int, ...], dtype: str) -> None:
    doc = {"key": "s", "size": list(size), "chunk_sizes": [list(chunk)], "encoding": "raw"}
    scale = Scale.from_json(doc)
    volume = VolumeInfo.from_json(
        {"type": "image", "data_type": dtype, "num_channels": 1, "scales": [doc]}
    )
    spec = default_sharding(scale, volume)
    bits = sum(scale.morton_bits)
    assert spec.hash == "identity" and spec.data_encoding == "raw"
    assert spec.preshift_bits + spec.minishard_bits + spec.shard_bits == bits
    assert shard_index_nbytes(spec) <= 8192
    per_shard = 2 ** (spec.preshift_bits + spec.minishard_bits)
    chunk_bytes = np.prod(chunk) * np.dtype(dtype).itemsize
    assert per_shard == 1 or per_shard * chunk_bytes <= 64 * 2**20
    Scale.from_json({**doc, "sharding": spec.to_json()})  # a valid sharded scale


@pytest.mark.parametrize("run", [4, 1 << 13])
def test_the_streamed_scale_plan_is_the_plan_in_memory(
    run: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard and unshard plans from spilled codes (tiny runs: merged from disk) equal
    :func:`plan_scale`'s, resumed targets included."""
    from asyncshard.convert import spill
    from asyncshard.convert.scaleplan import ScalePlan, plan_scale
    from asyncshard.formats.precomputed.spec import ShardingSpec
    from asyncshard.formats.precomputed.volume import Scale

    monkeypatch.setattr(spill, "RUN", run)
    doc = {
        "key": "s",
        "size": [40, 24, 16],
        "chunk_sizes": [[8, 8, 8]],
        "resolution": [1, 1, 1],
        "voxel_offset": [0, 0, 0],
        "encoding": "raw",
    }
    flat = Scale.from_json(doc)
    spec = ShardingSpec(2, "murmurhash3_x86_128", 1, 3, "gzip", "raw")
    sharded = Scale.from_json({**doc, "sharding": spec.to_json()})
    names = [flat.chunk_name((x, y, z)) for x in range(5) for y in range(3) for z in range(2)]
    shards = sorted({spec.shard_filename(int(s)) for s in range(spec.num_shards)})
    for src, dst, found, done in [
        (flat, sharded, names, shards[::3]),
        (sharded, flat, shards, names[::4]),
    ]:
        plan = ScalePlan(src, dst)
        for name in reversed(found):
            plan.add_source(name)
        for name in done:
            plan.add_done(name)
        streamed = list(plan.tasks())
        assert plan.count() == len(streamed)
        plan.close()
        expected = plan_scale(src, dst, found, done)
        normal = [(t.kind, t.target, sorted(t.sources), sorted(t.existing)) for t in streamed]
        assert normal == [
            (t.kind, t.target, sorted(t.sources), sorted(t.existing)) for t in expected
        ]
