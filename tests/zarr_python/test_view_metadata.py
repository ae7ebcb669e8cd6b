"""map_back_metadata: what a zarr.json written through the inner-chunk view becomes.

The view presents ``unsharded_metadata(real)``; a document written back may differ only
in the mapped members (shape with the same number of dimensions, attributes,
dimension_names, fill_value), which land on the real document while its chunk grid (the
shard shape) and sharding codec stay. Everything else raises and writes nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.documents import MAPPED_MEMBERS, map_back_metadata, unsharded_metadata
from asyncshard.formats.zarr3.metadata import parse_zarr3_array
from tests.zarr_python.helpers import sharded_doc

INNER_CODECS = [
    [{"name": "bytes", "configuration": {"endian": "little"}}],
    [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3}},
    ],
    [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}],
]
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=5))
ATTRIBUTES = st.dictionaries(st.text(max_size=5), JSON_SCALARS, max_size=3)


@st.composite
def sharded_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid sharded zarr.json, in any of the spellings the spec allows."""
    ndim = draw(st.integers(1, 3))
    chunk = draw(st.lists(st.integers(1, 8), min_size=ndim, max_size=ndim))
    per_shard = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    shape = draw(st.lists(st.integers(0, 100), min_size=ndim, max_size=ndim))
    index_codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if draw(st.booleans()):
        index_codecs.append(draw(st.sampled_from(["crc32c", {"name": "crc32c"}])))
    sharding: dict[str, Any] = {
        "chunk_shape": chunk,
        "codecs": copy.deepcopy(draw(st.sampled_from(INNER_CODECS))),
        "index_codecs": index_codecs,
    }
    if draw(st.booleans()):
        sharding["index_location"] = draw(st.sampled_from(["start", "end"]))
    encoding = draw(
        st.sampled_from(
            [
                {"name": "default"},
                "default",
                {"name": "default", "configuration": {"separator": "/"}},
                {"name": "default", "configuration": {"separator": "."}},
                {"name": "v2", "configuration": {"separator": "."}},
            ]
        )
    )
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": draw(st.sampled_from(["uint8", "int16", "float32"])),
        "chunk_grid": {
            "name": "regular",
            "configuration": {
                "chunk_shape": [c * n for c, n in zip(chunk, per_shard, strict=True)]
            },
        },
        "chunk_key_encoding": encoding,
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
    }
    if draw(st.booleans()):
        doc["attributes"] = draw(ATTRIBUTES)
    if draw(st.booleans()):
        doc["dimension_names"] = draw(
            st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=ndim, max_size=ndim)
        )
    if draw(st.booleans()):
        doc["storage_transformers"] = []
    parse_zarr3_array(doc)
    return doc


def respelled(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as zarr-python writes it back: every optional member spelled out."""
    out = copy.deepcopy(doc)
    out.setdefault("attributes", {})
    out.setdefault("storage_transformers", [])
    enc = out["chunk_key_encoding"]
    enc = {"name": enc} if isinstance(enc, str) else dict(enc)
    sep = "/" if enc["name"] == "default" else "."
    enc["configuration"] = {"separator": sep, **enc.get("configuration", {})}
    out["chunk_key_encoding"] = enc
    out["codecs"] = [
        {"name": c} if isinstance(c, str) else {**c, "configuration": c.get("configuration", {})}
        for c in out["codecs"]
    ]
    return out


@settings(max_examples=150, deadline=None)
@given(sharded_docs())
def test_writing_back_what_the_view_presents_changes_nothing(real: dict[str, Any]) -> None:
    presented = unsharded_metadata(real)
    assert map_back_metadata(real, presented) == real
    assert map_back_metadata(real, respelled(presented)) == real


@settings(max_examples=150, deadline=None)
@given(sharded_docs(), st.data())
def test_mapped_members_land_and_the_sharding_stays(real: dict[str, Any], data: Any) -> None:
    ndim = len(real["shape"])
    written = respelled(unsharded_metadata(real))
    written["shape"] = data.draw(st.lists(st.integers(0, 200), min_size=ndim, max_size=ndim))
    written["attributes"] = data.draw(ATTRIBUTES)
    written["fill_value"] = data.draw(st.integers(0, 9))
    names = data.draw(
        st.one_of(st.none(), st.lists(st.text(max_size=3), min_size=ndim, max_size=ndim))
    )
    written["dimension_names"] = names
    out = map_back_metadata(real, written)
    defaults = {"attributes": {}, "dimension_names": None}
    for member in MAPPED_MEMBERS:
        assert out.get(member, defaults.get(member)) == written[member]
    assert out["chunk_grid"] == real["chunk_grid"] and out["codecs"] == real["codecs"]
    rest = set(real) | set(out)
    for member in rest - set(MAPPED_MEMBERS):
        assert out.get(member) == real.get(member)
    assert parse_zarr3_array(out).chunks_per_shard == parse_zarr3_array(real).chunks_per_shard


def _unmappable_changes(presented: dict[str, Any]) -> list[tuple[str, Any]]:
    ndim = len(presented["shape"])
    chunk = presented["chunk_grid"]["configuration"]["chunk_shape"]
    return [
        ("shape", [*presented["shape"], 4]),  # another number of dimensions
        ("shape", [-1] * ndim),
        (
            "chunk_grid",
            {"name": "regular", "configuration": {"chunk_shape": [c + 1 for c in chunk]}},
        ),
        ("codecs", [{"name": "bytes", "configuration": {"endian": "big"}}]),
        ("data_type", "float64" if presented["data_type"] != "float64" else "int8"),
        ("chunk_key_encoding", {"name": "v2", "configuration": {"separator": "/"}}),
        ("node_type", "group"),
        ("dimension_names", ["x"] * (ndim + 1)),
        ("attributes", [1, 2]),
        ("storage_transformers", [{"name": "something"}]),
        ("codecs", [{"name": "sharding_indexed", "configuration": {}}]),
    ]


@settings(max_examples=60, deadline=None)
@given(sharded_docs(), st.data())
def test_anything_else_is_refused(real: dict[str, Any], data: Any) -> None:
    presented = unsharded_metadata(real)
    member, value = data.draw(st.sampled_from(_unmappable_changes(presented)))
    written = {**respelled(presented), member: value}
    before = copy.deepcopy(real)
    with pytest.raises(InvalidMetadataError, match=member):
        map_back_metadata(real, written)
    assert real == before


def test_the_error_says_how_to_change_the_chunk_shape() -> None:
    real = sharded_doc(shape=8, shard=4, chunk=2)
    written = unsharded_metadata(real)
    written["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [4]}}
    with pytest.raises(InvalidMetadataError, match="reshard"):
        map_back_metadata(real, written)
    written = unsharded_metadata(real)
    del written["shape"]  # a writer may not drop a mapped member the array needs
    with pytest.raises(InvalidMetadataError, match="shape"):
        map_back_metadata(real, written)
