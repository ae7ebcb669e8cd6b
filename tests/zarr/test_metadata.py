"""Tests for asyncshard.formats.zarr3.metadata: parsing, key translation, metadata conversion."""

from __future__ import annotations

import copy
import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.documents import sharded_metadata, unsharded_metadata
from asyncshard.formats.zarr3.grid import ChunkGrid, ShardingLayout
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.formats.zarr3.metadata import (
    DRAFT_SHARDING_URI,
    is_sharded,
    parse_draft_transformer,
    parse_zarr3_array,
)
from asyncshard.formats.zarr3.shard import IndexLayout, decode_shard, encode_shard
from tests.zarr.test_format import sample, sharded_zarr_json

# --------------------------------------------------------------------------- fixtures

SPEC_EXAMPLE: dict[str, Any] = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [128, 100],
    "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [32, 32],
                "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "gzip", "configuration": {"level": 1}},
                ],
                "index_codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "crc32c"},
                ],
                "index_location": "end",
            },
        }
    ],
    "attributes": {"note": "kept"},
    "dimension_names": ["y", "x"],
}


def draft_doc(transformer: dict[str, Any], separator: str = "/") -> dict[str, Any]:
    """Draft (2022) v3 array metadata with one storage transformer."""
    return {
        "shape": [4096, 64],
        "data_type": "<u2",
        "chunk_grid": {"type": "regular", "chunk_shape": [1, 2], "separator": separator},
        "chunk_memory_layout": "C",
        "compressor": None,
        "fill_value": 0,
        "extensions": [],
        "attributes": {},
        "storage_transformers": [transformer],
    }


SPEC_004_TRANSFORMER = {"name": "sharding", "configuration": {"chunks_per_shard": [32, 2]}}
SPEC_003_TRANSFORMER = {
    "storage_transformer": DRAFT_SHARDING_URI,
    "configuration": {"format": "indexed", "chunks_per_shard": [32, 2]},
}
ZARR_PY2_TRANSFORMER = {  # what zarr-python 2's experimental v3 support and acquire-zarr write
    "extension": DRAFT_SHARDING_URI,
    "type": "indexed",
    "configuration": {"chunks_per_shard": [32, 2]},
}


def edited(path: str, value: Any, base: dict[str, Any] = SPEC_EXAMPLE) -> dict[str, Any]:
    """A deep copy of ``base`` with ``value`` at a dotted ``path`` (``...`` deletes)."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return doc


# --------------------------------------------------------------------------- key translation


def test_spec_004_key_translation() -> None:
    layout = parse_draft_transformer(draft_doc(SPEC_004_TRANSFORMER), "foo/baz")
    assert layout.locate("data/root/foo/baz/c96/18") == ("data/root/foo/baz/c3/9", (0, 0))
    assert layout.locate("data/root/foo/baz/c97/19") == ("data/root/foo/baz/c3/9", (1, 1))
    assert layout.locate("data/root/foo/baz/c127/19") == ("data/root/foo/baz/c3/9", (31, 1))
    assert layout.locate("data/root/foo/baz/c128/19") == ("data/root/foo/baz/c4/9", (0, 1))
    assert layout.chunk_key((96, 18)) == "data/root/foo/baz/c96/18"
    assert layout.parse_shard_key("data/root/foo/baz/c3/9") == (3, 9)
    assert layout.locate("meta/root/foo/baz.array.json") is None
    assert layout.locate("data/root/foo/other/c96/18") is None


def test_spec_004_draft_layout_facts() -> None:
    for transformer in (SPEC_004_TRANSFORMER, SPEC_003_TRANSFORMER, ZARR_PY2_TRANSFORMER):
        layout = parse_draft_transformer(draft_doc(transformer), "/foo/baz/")
        assert layout.chunks_per_shard == (32, 2)
        assert layout.chunk_shape == (1, 2) and layout.shard_shape == (32, 4)
        assert layout.index == IndexLayout((32, 2), endian="little", checksum=False)
        assert layout.index.index_nbytes == 16 * 64
        assert layout.key_encoding == ChunkKeyEncoding("draft", "/", "data/root/foo/baz/")


def test_draft_dot_separator_and_root_array() -> None:
    layout = parse_draft_transformer(draft_doc(SPEC_004_TRANSFORMER, "."), "")
    assert layout.locate("data/root/c96.18") == ("data/root/c3.9", (0, 0))
    assert layout.parse_chunk_key("data/root/c96/18") is None


def test_v3_key_translation() -> None:
    doc = sharded_zarr_json([4096, 64], [32 * 4, 2 * 8], [4, 8], "uint8")
    layout = parse_zarr3_array(doc)
    assert layout.chunks_per_shard == (32, 2)
    assert layout.locate("c/96/18") == ("c/3/9", (0, 0))
    assert layout.locate("c/127/19") == ("c/3/9", (31, 1))
    assert layout.locate("zarr.json") is None
    dotted = parse_zarr3_array(edited("chunk_key_encoding.configuration.separator", ".", doc))
    assert dotted.locate("c.96.18") == ("c.3.9", (0, 0))
    assert dotted.locate("c/96/18") is None
    prefixed = parse_zarr3_array(doc, key_prefix="group/arr/")
    assert prefixed.locate("group/arr/c/96/18") == ("group/arr/c/3/9", (0, 0))


def test_v2_key_encoding() -> None:
    doc = sharded_zarr_json([64, 64], [8, 8], [2, 4], "uint8")
    doc["chunk_key_encoding"] = {"name": "v2"}
    layout = parse_zarr3_array(doc)
    assert layout.key_encoding == ChunkKeyEncoding("v2", ".")
    assert layout.locate("9.5") == ("2.2", (1, 1))
    assert layout.locate(".zarray") is None and layout.locate("zarr.json") is None
    doc["chunk_key_encoding"] = {"name": "v2", "configuration": {"separator": "/"}}
    assert parse_zarr3_array(doc).locate("9/5") == ("2/2", (1, 1))


@pytest.mark.parametrize(
    "key",
    [
        "zarr.json",
        "c",
        "c/",
        "c/1",
        "c/1/2/3",
        "c/-1/2",
        "c/+1/2",
        "c/ 1/2",
        "c/1 /2",
        "c/01/2",
        "c/1/2/",
        "c//2",
        "c/1.2",
        "c/\u0661/2",
        "c/1_0/2",
        "c/0x1/2",
        "/c/1/2",
        "d/1/2",
        "c1/2",
        "C/1/2",
        "c/1/\u00b2",
    ],
)
def test_parse_chunk_key_is_strict(key: str) -> None:
    layout = parse_zarr3_array(sharded_zarr_json([100, 100], [10, 10], [5, 5], "uint8"))
    assert layout.parse_chunk_key(key) is None
    assert layout.locate(key) is None


def test_parse_chunk_key_allows_coords_past_bounds() -> None:
    layout = parse_zarr3_array(sharded_zarr_json([10, 10], [10, 10], [5, 5], "uint8"))
    assert layout.parse_chunk_key("c/0/0") == (0, 0)
    assert layout.parse_chunk_key("c/7/12345678901234567890") == (7, 12345678901234567890)
    # beyond 20 digits no uint64-shaped array has such a chunk: not a chunk key
    assert layout.parse_chunk_key("c/7/123456789012345678901") is None
    assert layout.grid.chunk_in_bounds((1, 1)) and not layout.grid.chunk_in_bounds((2, 0))
    assert layout.grid.object_in_bounds((0, 0)) and not layout.grid.object_in_bounds((0, 1))


encodings = st.builds(
    ChunkKeyEncoding,
    kind=st.sampled_from(["default", "v2", "draft"]),
    separator=st.sampled_from(["/", "."]),
    prefix=st.sampled_from(["", "data/root/a/", "x/"]),
)


@given(encodings, st.lists(st.integers(0, 10**6), max_size=4))
def test_key_encoding_round_trip(encoding: ChunkKeyEncoding, coords: list[int]) -> None:
    key = encoding.encode(coords)
    assert encoding.decode(key, len(coords)) == tuple(coords)
    if coords or encoding.kind != "v2":  # v2 spells the 0-d chunk "0", like 1-d chunk 0
        assert encoding.decode(key, len(coords) + 1) is None


def test_zero_dimensional_keys() -> None:
    assert ChunkKeyEncoding("default").encode(()) == "c"
    assert ChunkKeyEncoding("v2").encode(()) == "0"
    assert ChunkKeyEncoding("draft", prefix="data/root/s/").encode(()) == "data/root/s/c"
    doc = sharded_zarr_json([], [], [], "float64")
    layout = parse_zarr3_array(doc)
    assert layout.index.n_chunks == 1 and layout.chunk_grid_shape == ()
    assert layout.locate("c") == ("c", ())
    assert layout.locate("c/0") is None
    assert layout.grid.chunks_in_object(()) == [()]


def test_zero_dimensional_zarr_python_round_trip(tmp_path: Path) -> None:
    import zarr

    doc = sharded_zarr_json([], [], [], "float64")
    (tmp_path / "zarr.json").write_text(json.dumps(doc))
    layout = parse_zarr3_array(doc)
    (tmp_path / layout.shard_key(())).write_bytes(
        encode_shard({(): np.float64(2.5).tobytes()}, layout.index)
    )
    assert zarr.open_array(str(tmp_path), mode="r")[()] == 2.5


# --------------------------------------------------------------------------- geometry


def test_grid_shapes_and_edge_shards() -> None:
    layout = parse_zarr3_array(sharded_zarr_json([10, 7], [4, 6], [2, 3], "uint8"))
    assert layout.chunk_grid_shape == (5, 3)
    assert layout.shard_grid_shape == (3, 2)
    assert layout.grid.chunks_in_object((0, 0)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert layout.grid.chunks_in_object((2, 1)) == [(4, 2)]
    assert layout.grid.chunks_in_object((2, 0)) == [(4, 0), (4, 1)]
    assert layout.grid.chunks_in_object((3, 0)) == []
    assert layout.grid.object_of((4, 2)) == ((2, 1), (0, 0))
    assert layout.grid.chunk_coords((2, 1), (0, 0)) == (4, 2)
    with pytest.raises(ValueError):
        layout.grid.chunk_coords((0, 0), (2, 0))
    with pytest.raises(ValueError):
        layout.chunk_key((1,))
    with pytest.raises(ValueError):
        layout.shard_key((0, -1))
    with pytest.raises(ValueError):
        layout.chunk_key((1.5, 0))  # type: ignore[arg-type]
    assert layout.chunk_key((np.int64(4), 2)) == "c/4/2"


def test_objects_over_a_box_of_chunks() -> None:
    grid = parse_zarr3_array(sharded_zarr_json([10, 7], [4, 6], [2, 3], "uint8")).grid
    assert grid.objects_over((0, 0), (2, 2)) == [(0, 0)]  # inside one shard
    assert grid.per_object == (2, 2)
    assert grid.objects_over((1, 0), (5, 1)) == [(0, 0), (1, 0), (2, 0)]  # across three
    assert grid.objects_over((1, 2), (4, 3)) == [(0, 1), (1, 1)]
    assert grid.objects_over((1, 1), (3, 4)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert grid.objects_over((2, 0), (2, 3)) == []  # an empty box
    scalar = parse_zarr3_array(sharded_zarr_json([], [], [], "uint8")).grid
    assert scalar.objects_over((), ()) == [()]


def test_empty_array_has_no_chunks() -> None:
    layout = parse_zarr3_array(sharded_zarr_json([0, 5], [4, 4], [2, 2], "uint8"))
    assert layout.chunk_grid_shape == (0, 3) and layout.shard_grid_shape == (0, 2)
    assert layout.grid.chunks_in_object((0, 0)) == []


def test_split_chunk_coords_vectorised() -> None:
    layout = parse_zarr3_array(sharded_zarr_json([100, 100, 100], [12, 10, 8], [4, 5, 2], "u1"))
    rng = np.random.default_rng(0)
    coords = rng.integers(0, 25, size=(200, 3))
    shards, positions = layout.grid.split_chunk_coords(coords)
    for c, s, p in zip(coords.tolist(), shards.tolist(), positions.tolist(), strict=True):
        assert layout.grid.object_of(c) == (tuple(s), tuple(p))
    with pytest.raises(ValueError):
        layout.grid.split_chunk_coords([[-1, 0, 0]])
    with pytest.raises(ValueError):
        layout.grid.split_chunk_coords([1, 2, 3])
    scalar = parse_zarr3_array(sharded_zarr_json([], [], [], "uint8"))
    shards, positions = scalar.grid.split_chunk_coords(np.zeros((3, 0), dtype=np.int64))
    assert shards.shape == positions.shape == (3, 0)


@given(data=st.data())
def test_chunks_at_lists_the_present_chunks_inside_the_array(data: st.DataObject) -> None:
    """The vectorised listing of a shard's chunks equals the per-chunk definition."""
    ndim = data.draw(st.integers(0, 3))
    shape = data.draw(st.tuples(*[st.integers(1, 20)] * ndim))
    chunks = data.draw(st.tuples(*[st.integers(1, 5)] * ndim))
    cps = data.draw(st.tuples(*[st.integers(1, 4)] * ndim))
    grid = ChunkGrid(shape, chunks, cps)
    obj = data.draw(st.tuples(*[st.integers(0, g - 1) for g in grid.object_grid]))
    mask = np.array(
        data.draw(st.lists(st.booleans(), min_size=math.prod(cps), max_size=math.prod(cps)))
    )
    mask = mask.reshape(cps)
    expected = [
        grid.chunk_coords(obj, pos)
        for pos in itertools.product(*map(range, cps))
        if mask[pos] and grid.chunk_in_bounds(grid.chunk_coords(obj, pos))
    ]
    assert grid.chunks_at(obj, np.argwhere(mask)) == expected


def test_chunks_at_the_end_of_the_largest_grid() -> None:
    """Positions past an edge shard are dropped before any sum that could overflow."""
    grid = ChunkGrid((2**63 - 1,), (1,), (3,))
    last = (grid.object_grid[0] - 1,)
    assert grid.chunks_at(last, np.array([[0], [1], [2]])) == [(2**63 - 2,)]


def test_sharding_layout_validates_consistency() -> None:
    index = IndexLayout((2, 2))
    with pytest.raises(InvalidMetadataError):
        ShardingLayout((8, 8), (4, 5), (2, 2), (2, 2), index)
    with pytest.raises(InvalidMetadataError):
        ShardingLayout((8, 8), (4, 4), (2, 2), (2, 2), IndexLayout((2, 1)))
    with pytest.raises(InvalidMetadataError):
        ShardingLayout((8,), (4, 4), (2, 2), (2, 2), index)


# --------------------------------------------------------------------------- zarr.json parsing


def test_parse_spec_example() -> None:
    layout = parse_zarr3_array(SPEC_EXAMPLE)
    assert layout.shape == (128, 100)
    assert layout.shard_shape == (64, 64) and layout.chunk_shape == (32, 32)
    assert layout.chunks_per_shard == (2, 2)
    assert layout.index.index_nbytes == 68
    assert layout.shard_grid_shape == (2, 2) and layout.chunk_grid_shape == (4, 4)
    assert is_sharded(SPEC_EXAMPLE)


def test_parse_variants() -> None:
    # tensorstore omits the key-encoding configuration; bare-string codecs; big endian; start
    doc = edited("chunk_key_encoding", {"name": "default"})
    cfg = doc["codecs"][0]["configuration"]
    cfg["index_codecs"] = [{"name": "bytes", "configuration": {"endian": "big"}}]
    cfg["index_location"] = "start"
    cfg["codecs"] = ["bytes"]
    layout = parse_zarr3_array(doc)
    assert layout.key_encoding == ChunkKeyEncoding("default", "/")
    assert layout.index == IndexLayout((2, 2), endian="big", checksum=False, location="start")
    del cfg["index_location"]
    assert parse_zarr3_array(doc).index.location == "end"
    assert parse_zarr3_array(edited("storage_transformers", [])).shape == (128, 100)


BAD_DOCS = [
    pytest.param(edited("zarr_format", ...), "zarr_format", id="no-zarr_format"),
    pytest.param(edited("zarr_format", 2), "zarr_format", id="zarr_format-2"),
    pytest.param(edited("node_type", "group"), "node_type", id="group"),
    pytest.param(edited("shape", [-1, 4]), "shape", id="negative-shape"),
    pytest.param(edited("shape", [True, 4]), "shape", id="bool-shape"),
    pytest.param(edited("shape", ...), "shape", id="no-shape"),
    pytest.param(edited("chunk_grid.name", "rectilinear"), "chunk_grid.name", id="grid"),
    pytest.param(
        edited("chunk_grid.configuration.chunk_shape", [64]), "chunk_grid", id="grid-ndim"
    ),
    pytest.param(
        edited("chunk_grid.configuration.chunk_shape", [0, 64]), "chunk_grid", id="grid-zero"
    ),
    pytest.param(edited("chunk_key_encoding", ...), "chunk_key_encoding", id="no-key-encoding"),
    pytest.param(edited("chunk_key_encoding.name", "v9"), "chunk_key_encoding", id="key-enc"),
    pytest.param(
        edited("chunk_key_encoding.configuration.separator", "-"), "separator", id="separator"
    ),
    pytest.param(edited("codecs", [{"name": "bytes"}]), "codecs", id="not-sharded"),
    pytest.param(edited("codecs", ...), "codecs", id="no-codecs"),
    pytest.param(
        edited(
            "codecs",
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, *SPEC_EXAMPLE["codecs"]],
        ),
        "codecs[0]",
        id="transpose-first",
    ),
    pytest.param(
        edited("codecs", [*SPEC_EXAMPLE["codecs"], {"name": "crc32c"}]),
        "codecs[1]",
        id="codec-after",
    ),
    pytest.param(
        edited("codecs.0.configuration.chunk_shape", [24, 32]), "chunk_shape", id="not-dividing"
    ),
    pytest.param(
        edited("codecs.0.configuration.chunk_shape", [32]), "chunk_shape", id="inner-ndim"
    ),
    pytest.param(edited("codecs.0.configuration.codecs", []), "configuration.codecs", id="inner"),
    pytest.param(
        edited("codecs.0.configuration.index_codecs.1", {"name": "gzip"}),
        "index_codecs[1]",
        id="gzip-index",
    ),
    pytest.param(
        edited("codecs.0.configuration.index_codecs", [{"name": "crc32c"}]),
        "index_codecs",
        id="no-bytes",
    ),
    pytest.param(
        edited(
            "codecs.0.configuration.index_codecs",
            [{"name": "bytes"}, {"name": "crc32c"}, {"name": "crc32c"}],
        ),
        "index_codecs[2]",
        id="double-crc",
    ),
    pytest.param(
        edited("codecs.0.configuration.index_codecs.0.configuration.endian", "middle"),
        "endian",
        id="endian",
    ),
    pytest.param(
        edited("codecs.0.configuration.index_location", "middle"), "index_location", id="loc"
    ),
    pytest.param(edited("codecs.0.configuration", ...), "chunk_shape", id="no-config"),
    pytest.param(edited("storage_transformers", [{"name": "x"}]), "storage_transformers", id="st"),
    pytest.param(["not", "a", "mapping"], "metadata", id="not-mapping"),
]


@pytest.mark.parametrize(("doc", "field"), BAD_DOCS)
def test_bad_metadata_names_the_field(doc: Any, field: str) -> None:
    with pytest.raises(InvalidMetadataError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_zarr3_array(doc)


def test_is_sharded() -> None:
    assert not is_sharded(edited("codecs", [{"name": "bytes"}]))
    assert not is_sharded({})
    assert is_sharded(edited("codecs", ["sharding_indexed"]))


BAD_DRAFTS = [
    pytest.param(draft_doc({"name": "blosc", "configuration": {}}), "storage_transformers[0]"),
    pytest.param(
        draft_doc({"name": "sharding", "configuration": {"chunks_per_shard": [2]}}),
        "chunks_per_shard",
    ),
    pytest.param(
        draft_doc({**SPEC_003_TRANSFORMER, "configuration": {"format": "x"}}),
        "format",
    ),
    pytest.param(
        {**draft_doc(SPEC_004_TRANSFORMER), "storage_transformers": []}, "storage_transformers"
    ),
    pytest.param(
        {**draft_doc(SPEC_004_TRANSFORMER), "chunk_grid": {"type": "irregular"}}, "chunk_grid"
    ),
    pytest.param(draft_doc(SPEC_004_TRANSFORMER, separator=":"), "chunk_grid.separator"),
    pytest.param(draft_doc({"name": "sharding"}), "configuration"),
]


@pytest.mark.parametrize(("doc", "field"), BAD_DRAFTS)
def test_bad_draft_metadata_names_the_field(doc: Any, field: str) -> None:
    with pytest.raises(InvalidMetadataError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_draft_transformer(doc, "foo")


# --------------------------------------------------------------------------- conversions


def test_unsharded_metadata_of_spec_example() -> None:
    flat = unsharded_metadata(SPEC_EXAMPLE)
    assert flat["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": [32, 32]}}
    assert flat["codecs"] == SPEC_EXAMPLE["codecs"][0]["configuration"]["codecs"]
    for key in ("attributes", "dimension_names", "fill_value", "data_type", "shape"):
        assert flat[key] == SPEC_EXAMPLE[key]
    assert not is_sharded(flat)
    assert SPEC_EXAMPLE["chunk_grid"]["configuration"]["chunk_shape"] == [64, 64]  # untouched
    assert sharded_metadata(flat, (2, 2)) == SPEC_EXAMPLE


@pytest.mark.parametrize(("location", "checksum"), [("end", True), ("start", False)])
def test_sharded_unsharded_round_trip(location: Literal["start", "end"], checksum: bool) -> None:
    flat = unsharded_metadata(SPEC_EXAMPLE)
    flat["codecs"] = [{"name": "transpose", "configuration": {"order": [1, 0]}}, *flat["codecs"]]
    sharded = sharded_metadata(flat, [4, 1], index_location=location, checksum=checksum)
    layout = parse_zarr3_array(sharded)
    assert layout.shard_shape == (128, 32) and layout.chunks_per_shard == (4, 1)
    assert layout.index.location == location and layout.index.checksum is checksum
    # the transpose now sits inside the sharding codec, acting on inner chunks
    assert sharded["codecs"][0]["configuration"]["codecs"][0]["name"] == "transpose"
    assert unsharded_metadata(sharded) == flat
    again = unsharded_metadata(sharded)
    assert sharded_metadata(again, [4, 1], index_location=location, checksum=checksum) == sharded


def test_sharded_metadata_rejects_bad_input() -> None:
    with pytest.raises(InvalidMetadataError, match="already sharded"):
        sharded_metadata(SPEC_EXAMPLE, [1, 1])
    flat = unsharded_metadata(SPEC_EXAMPLE)
    with pytest.raises(ValueError):
        sharded_metadata(flat, [2])
    with pytest.raises(ValueError):
        sharded_metadata(flat, [2, 0])
    with pytest.raises(InvalidMetadataError, match="chunk_grid"):
        sharded_metadata(edited("chunk_grid.name", "rectilinear", flat), [2, 2])


def test_round_trip_of_zarr_python_metadata(tmp_path: Path) -> None:
    import zarr

    zarr.create_array(
        store=str(tmp_path / "a"),
        shape=(20, 30),
        chunks=(5, 5),
        shards=(10, 15),
        dtype="float32",
        dimension_names=["y", "x"],
        attributes={"a": 1},
    )
    doc = json.loads((tmp_path / "a" / "zarr.json").read_text())
    flat = unsharded_metadata(doc)
    assert sharded_metadata(flat, (2, 3)) == doc
    zarr.create_array(
        store=str(tmp_path / "f"),
        shape=(20, 30),
        chunks=(5, 5),
        dtype="float32",
        dimension_names=["y", "x"],
        attributes={"a": 1},
    )
    flat_doc = json.loads((tmp_path / "f" / "zarr.json").read_text())
    assert flat == flat_doc


def test_round_trip_of_tensorstore_metadata(tmp_path: Path) -> None:
    import tensorstore as ts

    meta = sharded_zarr_json([9, 11], [4, 6], [2, 3], "uint32", location="start")
    ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(tmp_path / "t")},
            "metadata": {k: meta[k] for k in ("shape", "data_type", "chunk_grid", "codecs")},
            "create": True,
        }
    ).result()
    doc = json.loads((tmp_path / "t" / "zarr.json").read_text())
    assert sharded_metadata(unsharded_metadata(doc), (2, 2), index_location="start") == doc


def test_unshard_zarr_python_array_by_hand(tmp_path: Path) -> None:
    """Split zarr-python shards into flat chunks with our layout; zarr-python reads them."""
    import zarr

    data = sample((11, 9), "int16", seed=5)
    # default compressors: the inner chunks are zstd-compressed, copied verbatim
    src = zarr.create_array(
        store=str(tmp_path / "s"), shape=data.shape, chunks=(2, 3), shards=(4, 6), dtype="int16"
    )
    src[...] = data
    doc = json.loads((tmp_path / "s" / "zarr.json").read_text())
    layout = parse_zarr3_array(doc)
    flat_layout = ChunkKeyEncoding("default", "/")
    dst = tmp_path / "d"
    dst.mkdir()
    (dst / "zarr.json").write_text(json.dumps(unsharded_metadata(doc)))
    for shard in np.ndindex(*layout.shard_grid_shape):
        path = tmp_path / "s" / layout.shard_key(shard)
        if not path.exists():
            continue
        for pos, view in decode_shard(path.read_bytes(), layout.index).items():
            out = dst / flat_layout.encode(layout.grid.chunk_coords(shard, pos))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(view)
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_shard_flat_zarr_python_array_by_hand(tmp_path: Path) -> None:
    """Pack flat zarr-python chunks into shards with our layout; zarr-python and tensorstore
    read the result."""
    import tensorstore as ts
    import zarr

    data = sample((11, 9), "int16", seed=6)
    src = zarr.create_array(
        store=str(tmp_path / "s"), shape=data.shape, chunks=(2, 3), dtype="int16"
    )
    src[...] = data
    flat_doc = json.loads((tmp_path / "s" / "zarr.json").read_text())
    doc = sharded_metadata(flat_doc, (2, 2), index_location="start")
    layout = parse_zarr3_array(doc)
    dst = tmp_path / "d"
    dst.mkdir()
    (dst / "zarr.json").write_text(json.dumps(doc))
    for shard in np.ndindex(*layout.shard_grid_shape):
        chunks = {}
        for coords in layout.grid.chunks_in_object(shard):
            flat_path = tmp_path / "s" / layout.chunk_key(coords)
            if flat_path.exists():
                chunks[layout.grid.object_of(coords)[1]] = flat_path.read_bytes()
        if chunks:
            out = dst / layout.shard_key(shard)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(encode_shard(chunks, layout.index))
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst)}}
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), data)
