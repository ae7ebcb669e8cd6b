"""Precomputed volumes: info parsing, chunk names and ids; tensorstore as the oracle."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.precomputed.shard import (
    build_shards,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo

SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 1,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 2,
    "shard_bits": 2,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}
INFO: dict[str, Any] = {
    "@type": "neuroglancer_multiscale_volume",
    "type": "segmentation",
    "data_type": "uint64",
    "num_channels": 1,
    "mesh": "mesh",
    "scales": [
        {
            "key": "8_8_8",
            "size": [10, 7, 5],
            "voxel_offset": [3, -2, 1],
            "chunk_sizes": [[4, 3, 2]],
            "resolution": [8, 8, 8.5],
            "encoding": "compressed_segmentation",
            "compressed_segmentation_block_size": [8, 8, 8],
            "sharding": SHARDING,
            "jpeg_quality": 1,
        },
        {"key": "16_16_16", "size": [5, 4, 3], "chunk_sizes": [[64, 64, 64]], "encoding": "raw"},
    ],
}


def scale_of(size: Any, chunk: Any, offset: Any = (0, 0, 0), **kw: Any) -> Scale:
    doc = {"key": "s", "size": list(size), "chunk_sizes": [list(chunk)], "encoding": "raw"}
    doc["voxel_offset"] = list(offset)
    doc.update(kw)
    return Scale.from_json(doc)


# --------------------------------------------------------------------------- info


def test_parse_info() -> None:
    info = VolumeInfo.from_json(INFO)
    assert (info.type, info.data_type, info.num_channels) == ("segmentation", "uint64", 1)
    assert info.dtype == np.dtype("<u8")
    s0, s1 = info.scales
    assert s0.key == "8_8_8"
    assert s0.size == (10, 7, 5)
    assert s0.voxel_offset == (3, -2, 1)
    assert s0.chunk_sizes == ((4, 3, 2),)
    assert s0.resolution == (8.0, 8.0, 8.5)
    assert s0.sharding == ShardingSpec.from_json(SHARDING)
    assert s0.compressed_segmentation_block_size == (8, 8, 8)
    assert s0.grid_shape == (3, 3, 3)
    assert s1.voxel_offset == (0, 0, 0)
    assert s1.sharding is None
    assert s1.resolution is None
    assert s1.grid_shape == (1, 1, 1)
    assert info.scale("16_16_16") is s1
    with pytest.raises(KeyError):
        info.scale("nope")


def test_info_json_round_trip() -> None:
    info = VolumeInfo.from_json(INFO)
    doc = info.to_json()
    assert doc["mesh"] == "mesh"
    assert doc["scales"][0]["jpeg_quality"] == 1
    assert doc["scales"][0]["sharding"] == SHARDING
    assert VolumeInfo.from_json(json.loads(json.dumps(doc))) == info
    assert "@type" in doc


def mutate(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(INFO)
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("@type",), "neuroglancer_annotations_v1", "@type"),
        (("type",), KeyError, "type"),
        (("type",), 3, "type"),
        (("data_type",), "float64", "data_type"),
        (("data_type",), KeyError, "data_type"),
        (("num_channels",), 0, "num_channels"),
        (("num_channels",), True, "num_channels"),
        (("scales",), [], "scales"),
        (("scales",), {}, "scales"),
        (("scales", 1), [], r"scales\[1\]"),
        (("scales", 0, "key"), KeyError, r"scales\[0\]\.key"),
        (("scales", 0, "key"), "", r"scales\[0\]\.key"),
        (("scales", 0, "size"), [1, 2], r"scales\[0\]\.size"),
        (("scales", 0, "size"), [0, 2, 3], r"scales\[0\]\.size"),
        (("scales", 0, "size"), [1.5, 2, 3], r"scales\[0\]\.size"),
        (("scales", 0, "size"), KeyError, r"scales\[0\]\.size"),
        (("scales", 0, "voxel_offset"), [0, 0, "1"], r"scales\[0\]\.voxel_offset"),
        (("scales", 0, "voxel_offset"), [2**62, 0, 0], r"scales\[0\]\.voxel_offset"),
        (("scales", 0, "chunk_sizes"), [], r"scales\[0\]\.chunk_sizes"),
        (("scales", 0, "chunk_sizes"), [4, 3, 2], r"scales\[0\]\.chunk_sizes\[0\]"),
        (("scales", 0, "chunk_sizes"), [[4, 3, 0]], r"scales\[0\]\.chunk_sizes\[0\]"),
        (("scales", 0, "chunk_sizes"), [[4, 3, 2], [8, 8, 8]], r"scales\[0\]\.chunk_sizes"),
        (("scales", 0, "encoding"), "webp", r"scales\[0\]\.encoding"),
        (("scales", 0, "resolution"), [1, 1], r"scales\[0\]\.resolution"),
        (("scales", 0, "resolution"), [1, 1, float("nan")], r"scales\[0\]\.resolution"),
        (("scales", 0, "resolution"), [10**400, 8, 8], r"scales\[0\]\.resolution"),  # no float
        (("scales", 0, "compressed_segmentation_block_size"), KeyError, "block_size"),
        (("scales", 0, "compressed_segmentation_block_size"), [8, 8], "block_size"),
        (("scales", 0, "sharding", "shard_bits"), 63, r"scales\[0\]\.sharding.*shard_bits"),
        (("scales", 0, "sharding", "hash"), "md5", r"scales\[0\]\.sharding.*hash"),
        (("scales", 0, "sharding"), "yes", r"scales\[0\]\.sharding"),
    ],
)
def test_invalid_info(path: tuple[Any, ...], value: Any, message: str) -> None:
    with pytest.raises(InvalidMetadataError, match=message):
        VolumeInfo.from_json(mutate(path, value))


def test_invalid_info_not_object() -> None:
    with pytest.raises(InvalidMetadataError, match="info"):
        VolumeInfo.from_json([INFO])


def test_sharded_scale_needs_64_bit_ids() -> None:
    doc = mutate(("scales", 0, "size"), [2**22, 2**22, 2**22])
    doc["scales"][0]["chunk_sizes"] = [[1, 1, 1]]
    with pytest.raises(InvalidMetadataError, match="64 bits"):
        VolumeInfo.from_json(doc)
    del doc["scales"][0]["sharding"]
    assert VolumeInfo.from_json(doc).scales[0].sharding is None  # unsharded: no limit


def test_null_sharding_is_unsharded() -> None:
    assert VolumeInfo.from_json(mutate(("scales", 0, "sharding"), None)).scales[0].sharding is None


# --------------------------------------------------------------------------- chunk names


def test_chunk_names() -> None:
    scale = scale_of((10, 7, 5), (4, 3, 2), (3, -2, 1))
    assert scale.grid_shape == (3, 3, 3)
    assert scale.chunk_name((0, 0, 0)) == "3-7_-2-1_1-3"
    assert scale.chunk_name((2, 2, 2)) == "11-13_4-5_5-6"
    assert scale.chunk_shape((2, 2, 2)) == (2, 1, 1)
    assert scale.chunk_bounds((1, 1, 0)) == ((7, 1, 1), (11, 4, 3))
    assert scale.parse_chunk_name("11-13_4-5_5-6") == (2, 2, 2)
    assert scale.parse_chunk_name("3-7_-2-1_1-3") == (0, 0, 0)
    with pytest.raises(ValueError):
        scale.chunk_name((3, 0, 0))
    with pytest.raises(ValueError):
        scale.chunk_name((0, 0))


def test_chunk_names_negative_ranges() -> None:
    scale = scale_of((8, 8, 8), (4, 4, 4), (-8, -4, 0))
    assert scale.chunk_name((0, 0, 0)) == "-8--4_-4-0_0-4"
    assert scale.parse_chunk_name("-8--4_-4-0_0-4") == (0, 0, 0)


@pytest.mark.parametrize(
    "name",
    [
        "11-15_4-5_5-6",  # edge chunk not clipped
        "7-11_1-4_1-2",  # z end not chunk aligned
        "4-8_1-4_1-3",  # start not chunk aligned
        "15-19_1-4_1-3",  # past the grid
        "-1-3_1-4_1-3",  # before the grid
        "07-11_1-4_1-3",  # leading zero
        "+7-11_1-4_1-3",
        "7-11_1-4_1-3_",
        "7-11_1-4",
        "7-11_1-4_1-3/",
        "7-11 1-4 1-3",
        "7-11_1-4_1-3.gz",
        "",
        "\u0667-11_1-4_1-3",  # non-ASCII digit
        "7" * 5000 + "-11_1-4_1-3",  # past int()'s 4300 digits: not a chunk name, no error
        "7-11_1-4_1-" + "3" * 5000,
        "0" * 5000 + "7-11_1-4_1-3",
        "7" * 20 + "-11_1-4_1-3",  # past the ±2**62 index range
    ],
)
def test_parse_chunk_name_is_strict(name: str) -> None:
    scale = scale_of((10, 7, 5), (4, 3, 2), (3, -2, 1))
    assert scale.parse_chunk_name("7-11_1-4_1-3") == (1, 1, 0)
    assert scale.parse_chunk_name(name) is None
    assert scale.chunk_id_of_name(name) is None


def test_chunk_names_at_the_edge_of_the_index_range() -> None:
    """The bounded digit counts still admit every coordinate of the ±2**62 range."""
    scale = scale_of((8, 8, 8), (4, 4, 4), (2**62 - 9, -(2**62) + 1, 0))
    for pos in ((0, 0, 0), (1, 1, 1)):
        name = scale.chunk_name(pos)
        assert scale.parse_chunk_name(name) == pos, name


@st.composite
def scales_and_positions(draw: st.DrawFn) -> tuple[Scale, tuple[int, int, int]]:
    size = [draw(st.integers(1, 500)) for _ in range(3)]
    chunk = [draw(st.integers(1, 64)) for _ in range(3)]
    offset = [draw(st.integers(-1000, 1000)) for _ in range(3)]
    scale = scale_of(size, chunk, offset)
    x, y, z = (draw(st.integers(0, g - 1)) for g in scale.grid_shape)
    return scale, (x, y, z)


@given(scales_and_positions())
def test_chunk_name_and_id_round_trip(case: tuple[Scale, tuple[int, int, int]]) -> None:
    scale, pos = case
    assert scale.parse_chunk_name(scale.chunk_name(pos)) == pos
    chunk_id = scale.chunk_id(pos)
    assert scale.chunk_id_of_name(scale.chunk_name(pos)) == chunk_id
    assert scale.grid_pos_of(chunk_id) == pos
    assert scale.chunk_ids(np.array([pos])).tolist() == [chunk_id]
    assert scale.grid_positions_of([chunk_id]).tolist() == [list(pos)]


@given(scales_and_positions(), st.lists(st.integers(-3, 3), min_size=6, max_size=6))
def test_exactly_the_chunk_names_parse(
    case: tuple[Scale, tuple[int, int, int]], nudges: list[int]
) -> None:
    """A chunk's name with its numbers nudged parses exactly when it is still the name
    of a chunk (by definition: ``chunk_name`` of the position it names)."""
    scale, pos = case
    start, stop = scale.chunk_bounds(pos)
    bounds = [v for pair in zip(start, stop, strict=True) for v in pair]
    name = "{}-{}_{}-{}_{}-{}".format(*(n + d for n, d in zip(bounds, nudges, strict=True)))
    starts = [int(n) + d for n, d in zip(bounds[::2], nudges[::2], strict=True)]
    candidate = tuple(
        (s - o) // c for s, o, c in zip(starts, scale.voxel_offset, scale.chunk_size, strict=True)
    )
    inside = all(0 <= p < g for p, g in zip(candidate, scale.grid_shape, strict=True))
    named = inside and scale.chunk_name(candidate) == name
    assert scale.parse_chunk_name(name) == (candidate if named else None), name
    assert scale.chunk_id_of_name(name) == (scale.chunk_id(candidate) if named else None)


def test_chunk_ids_cover_the_grid() -> None:
    scale = scale_of((10, 7, 5), (4, 3, 2))
    grid = np.stack(np.meshgrid(*(np.arange(g) for g in scale.grid_shape), indexing="ij"), -1)
    positions = grid.reshape(-1, 3)
    ids = scale.chunk_ids(positions)
    assert len(set(ids.tolist())) == 27
    assert ids.tolist() == [scale.chunk_id(tuple(p)) for p in positions.tolist()]
    assert (scale.grid_positions_of(ids) == positions).all()
    assert scale.chunk_id((2, 2, 1)) == 0b011100
    with pytest.raises(ValueError):
        scale.grid_pos_of(0b111111)
    with pytest.raises(ValueError):
        scale.grid_pos_of(-1)


# --------------------------------------------------------------------------- tensorstore oracle

ORACLE_CASES = [
    pytest.param("identity", 0, "raw", "raw", id="identity-raw"),
    pytest.param("identity", 2, "gzip", "raw", id="identity-preshift2-gzip-index"),
    pytest.param("murmurhash3_x86_128", 0, "raw", "gzip", id="murmur-gzip-data"),
    pytest.param("murmurhash3_x86_128", 1, "gzip", "gzip", id="murmur-preshift1-gzip-both"),
]
SIZE, CHUNK, OFFSET = (9, 7, 5), (4, 3, 2), (3, -2, 1)  # grid (3, 3, 3) with clipped edges


def sharding_doc(hash: str, preshift: int, index: str, data: str) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": preshift,
        "hash": hash,
        "minishard_bits": 1,
        "shard_bits": 2,
        "minishard_index_encoding": index,
        "data_encoding": data,
    }


def voxels(num_channels: int = 2) -> np.ndarray[Any, np.dtype[np.uint16]]:
    rng = np.random.default_rng(7)
    return rng.integers(1, 60000, size=(*SIZE, num_channels), dtype=np.uint16)


def chunk_bytes(scale: Scale, values: np.ndarray[Any, Any], pos: tuple[int, int, int]) -> bytes:
    """Raw encoding: the clipped block, x fastest, channel slowest (C order of c, z, y, x)."""
    (x0, y0, z0), (x1, y1, z1) = scale.chunk_bounds(pos)
    ox, oy, oz = scale.voxel_offset
    block = values[x0 - ox : x1 - ox, y0 - oy : y1 - oy, z0 - oz : z1 - oz, :]
    return np.ascontiguousarray(block.transpose(3, 2, 1, 0)).astype("<u2").tobytes()


def ts_spec(path: Path, scale_metadata: dict[str, Any], create: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(path)},
    }
    if create:
        spec["multiscale_metadata"] = {"type": "image", "data_type": "uint16", "num_channels": 2}
        spec["scale_metadata"] = scale_metadata
        spec["create"] = True
    return spec


def grid_positions(scale: Scale) -> list[tuple[int, int, int]]:
    gx, gy, gz = scale.grid_shape
    return [(x, y, z) for x in range(gx) for y in range(gy) for z in range(gz)]


@pytest.mark.parametrize(("hash", "preshift", "index", "data"), ORACLE_CASES)
def test_decode_tensorstore_shards(
    tmp_path: Path, hash: str, preshift: int, index: str, data: str
) -> None:
    scale_md = {
        "size": list(SIZE),
        "chunk_size": list(CHUNK),
        "voxel_offset": list(OFFSET),
        "encoding": "raw",
        "sharding": sharding_doc(hash, preshift, index, data),
    }
    store = ts.open(ts_spec(tmp_path, scale_md, create=True)).result()
    values = voxels()
    store[...] = values
    info = VolumeInfo.from_json(json.loads((tmp_path / "info").read_text()))
    scale = info.scales[0]
    spec = scale.sharding
    assert spec is not None
    assert spec.to_json() == scale_md["sharding"]

    found: dict[tuple[int, int, int], bytes] = {}
    for shard_path in sorted((tmp_path / scale.key).iterdir()):
        shard_number = spec.parse_shard_filename(shard_path.name)
        assert shard_number is not None, shard_path.name
        shard = shard_path.read_bytes()
        found.update(_decode_shard(shard, spec, scale, shard_number, shard_path.name))
    assert sorted(found) == grid_positions(scale)
    for pos, raw in found.items():
        assert raw == chunk_bytes(scale, values, pos), pos


def _decode_shard(
    shard: bytes, spec: ShardingSpec, scale: Scale, shard_number: int, key: str
) -> dict[tuple[int, int, int], bytes]:
    nbytes = shard_index_nbytes(spec)
    index = decode_shard_index(shard[:nbytes], spec, key=key, shard_size=len(shard))
    out = {}
    for minishard in range(spec.num_minishards):
        start, end = minishard_index_range(index, minishard)
        if start == end:
            continue
        ids, starts, ends = decode_minishard_index(
            shard[start:end], spec, key=key, shard_size=len(shard)
        )
        for chunk_id, s, e in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
            assert spec.shard_and_minishard_of(chunk_id) == (shard_number, minishard)
            out[scale.grid_pos_of(chunk_id)] = decode_chunk_data(shard[s:e], spec, key=key)
    return out


@pytest.mark.parametrize(("hash", "preshift", "index", "data"), ORACLE_CASES)
def test_tensorstore_reads_built_shards(
    tmp_path: Path, hash: str, preshift: int, index: str, data: str
) -> None:
    info_doc = {
        "@type": "neuroglancer_multiscale_volume",
        "type": "image",
        "data_type": "uint16",
        "num_channels": 2,
        "scales": [
            {
                "key": "s0",
                "size": list(SIZE),
                "voxel_offset": list(OFFSET),
                "chunk_sizes": [list(CHUNK)],
                "resolution": [1, 1, 1],
                "encoding": "raw",
                "sharding": sharding_doc(hash, preshift, index, data),
            }
        ],
    }
    info = VolumeInfo.from_json(info_doc)
    scale = info.scales[0]
    assert scale.sharding is not None
    values = voxels()
    chunks = {scale.chunk_id(p): chunk_bytes(scale, values, p) for p in grid_positions(scale)}
    (tmp_path / "s0").mkdir()
    for name, shard in build_shards(chunks, scale.sharding).items():
        (tmp_path / "s0" / name).write_bytes(shard)
    (tmp_path / "info").write_text(json.dumps(info.to_json()))

    store = ts.open(ts_spec(tmp_path, {}, create=False)).result()
    assert store.domain.inclusive_min == (*OFFSET, 0)
    np.testing.assert_array_equal(store.read().result(), values)


def test_unsharded_chunk_names_match_tensorstore(tmp_path: Path) -> None:
    scale_md = {
        "size": list(SIZE),
        "chunk_size": list(CHUNK),
        "voxel_offset": list(OFFSET),
        "encoding": "raw",
    }
    store = ts.open(ts_spec(tmp_path, scale_md, create=True)).result()
    values = voxels()
    store[...] = values
    scale = VolumeInfo.from_json(json.loads((tmp_path / "info").read_text())).scales[0]
    names = {p.name for p in (tmp_path / scale.key).iterdir()}
    assert names == {scale.chunk_name(p) for p in grid_positions(scale)}
    for name in names:
        pos = scale.parse_chunk_name(name)
        assert pos is not None
        assert (tmp_path / scale.key / name).read_bytes() == chunk_bytes(scale, values, pos)
