"""Every metadata parser and shard decoder admits only asyncshard's typed errors.

Hypothesis feeds them valid documents with one member replaced by arbitrary JSON (huge
and negative numbers, lists where names belong, deep nesting, wrong types) and shards
with arbitrary bytes; whatever fails must fail with an ``AsyncShardError`` (the server
turns those into clean 4xx/5xx answers), never a ``TypeError``, ``KeyError``,
``RecursionError`` or bare ``ValueError``.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncshard.errors import AsyncShardError
from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.formats.precomputed.shard import (
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    gunzip_bounded,
    split_shard,
)
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import VolumeInfo, unsharded_info
from asyncshard.formats.zarr3.documents import unsharded_metadata
from asyncshard.formats.zarr3.metadata import parse_draft_transformer, parse_zarr3_array
from asyncshard.formats.zarr3.shard import IndexLayout, decode_index, decode_shard
from tests.zarr.helpers import array_doc

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([10**4000 + 1, -(2**64), 2**64, 2**63])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

ZARR = array_doc([40, 40], [16, 16], [4, 4])
DRAFT = {
    "shape": [40, 40],
    "data_type": "uint8",
    "chunk_grid": {"type": "regular", "chunk_shape": [4, 4], "separator": "/"},
    "chunk_memory_layout": "C",
    "fill_value": 0,
    "extensions": [],
    "attributes": {},
    "storage_transformers": [
        {
            "type": "indexed",
            "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
            "configuration": {"chunks_per_shard": [4, 4]},
        }
    ],
}
SHARDING = ShardingSpec(1, "murmurhash3_x86_128", 2, 3, "gzip", "gzip").to_json()
INFO = {
    "@type": "neuroglancer_multiscale_volume",
    "type": "image",
    "data_type": "uint8",
    "num_channels": 1,
    "scales": [
        {
            "key": "8_8_8",
            "size": [10, 7, 5],
            "voxel_offset": [-3, 0, 2],
            "chunk_sizes": [[4, 4, 4]],
            "resolution": [8, 8, 8],
            "encoding": "raw",
            "sharding": SHARDING,
        }
    ],
}


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a member or item of a JSON document."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += paths(value, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: dict[str, Any]) -> Any:
    """``doc`` with the member at one path replaced by arbitrary JSON (or removed)."""
    out = copy.deepcopy(doc)
    path = draw(st.sampled_from(paths(doc)))
    if not path:
        return draw(JSON)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(JSON)
    return out


def only_typed_errors(call: Callable[[], object]) -> None:
    with contextlib.suppress(AsyncShardError):
        call()


FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(mutated(ZARR))
def test_zarr3_metadata(doc: Any) -> None:
    only_typed_errors(lambda: parse_zarr3_array(doc, key_prefix="arr/"))
    only_typed_errors(lambda: unsharded_metadata(doc))


@FAST
@given(mutated(DRAFT))
def test_draft_transformer_metadata(doc: Any) -> None:
    only_typed_errors(lambda: parse_draft_transformer(doc, "arr"))


@FAST
@given(mutated(SHARDING))
def test_precomputed_sharding_spec(doc: Any) -> None:
    only_typed_errors(lambda: ShardingSpec.from_json(doc))


@FAST
@given(mutated(INFO))
def test_precomputed_info(doc: Any) -> None:
    only_typed_errors(lambda: VolumeInfo.from_json(doc))
    only_typed_errors(lambda: unsharded_info(doc))


@FAST
@given(st.binary(max_size=64) | JSON.map(lambda v: json.dumps(v).encode()))
def test_json_documents(raw: bytes) -> None:
    only_typed_errors(lambda: parse_json_object(raw, "zarr.json"))


def test_hostile_json_text() -> None:
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a": ' + b"7" * 5000 + b"}", b"\xff"):
        only_typed_errors(lambda raw=raw: parse_json_object(raw, "zarr.json"))  # type: ignore[misc]


LAYOUT = IndexLayout((4, 4))
SPEC = ShardingSpec.from_json(SHARDING)


@FAST
@given(st.binary(max_size=600), st.integers(min_value=0, max_value=2**65))
def test_zarr_shard_decoders(buf: bytes, size: int) -> None:
    only_typed_errors(lambda: decode_index(buf[: LAYOUT.index_nbytes], LAYOUT, shard_size=size))
    only_typed_errors(lambda: decode_shard(buf, LAYOUT))


@FAST
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=2**65))
def test_precomputed_shard_decoders(buf: bytes, size: int) -> None:
    only_typed_errors(lambda: decode_shard_index(buf[:64], SPEC, shard_size=size))
    only_typed_errors(lambda: decode_minishard_index(buf, SPEC, shard_size=size))
    only_typed_errors(lambda: decode_minishard_index(gzip.compress(buf), SPEC))
    only_typed_errors(lambda: split_shard(buf, SPEC, 0))
    only_typed_errors(lambda: gunzip_bounded(buf, 100))
    only_typed_errors(lambda: decode_chunk_data(gzip.compress(buf * 10), SPEC, max_nbytes=50))


def test_numbers_json_accepts_but_no_array_has() -> None:
    """JSON parses integers of up to 4,300 digits; their products are longer than Python
    can even format. Dimensions are int64, so such documents are refused up front."""
    huge = 10**4000 + 1
    doc = copy.deepcopy(ZARR)
    doc["shape"] = [huge, 40]
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [huge, 16]
    doc["codecs"][0]["configuration"]["chunk_shape"] = [huge, 4]
    only_typed_errors(lambda: parse_zarr3_array(doc, key_prefix="arr/"))
    raw = json.dumps(doc).encode()
    only_typed_errors(lambda: parse_zarr3_array(parse_json_object(raw, "zarr.json")))
