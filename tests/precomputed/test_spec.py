"""Sharding spec: JSON validation, hashing, shard mapping, file names, Morton codes."""

from __future__ import annotations

from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.morton import morton_code
from asyncshard.formats.precomputed.spec import (
    ShardingSpec,
    compressed_morton_bits,
    compressed_morton_code,
    decode_compressed_morton,
    murmurhash3_x86_128_low64,
    murmurhash3_x86_128_low64_array,
)

U64 = st.integers(0, 2**64 - 1)


def sharding_json(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "identity",
        "minishard_bits": 3,
        "shard_bits": 3,
        "minishard_index_encoding": "raw",
        "data_encoding": "raw",
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


@st.composite
def specs(draw: st.DrawFn) -> ShardingSpec:
    minishard_bits = draw(st.integers(0, 32))
    return ShardingSpec(
        preshift_bits=draw(st.integers(0, 64)),
        hash=draw(st.sampled_from(["identity", "murmurhash3_x86_128"])),
        minishard_bits=minishard_bits,
        shard_bits=draw(st.integers(0, 64 - minishard_bits)),
    )


# --------------------------------------------------------------------------- hashing

PUBLISHED = [(0, 0x4772B084E028AE41), (1, 0xE8BD67D616D4CE9A), (42, 0xC20B94F95119F47A)]


@pytest.mark.parametrize(("key", "expected"), PUBLISHED)
def test_murmur_published_vectors(key: int, expected: int) -> None:
    assert murmurhash3_x86_128_low64(key) == expected
    out = murmurhash3_x86_128_low64_array(np.array([key], dtype=np.uint64))
    assert out.dtype == np.uint64
    assert int(out[0]) == expected


@given(st.lists(U64, max_size=50))
def test_vectorised_murmur_matches_mmh3(keys: list[int]) -> None:
    expected = [mmh3.hash128(k.to_bytes(8, "little"), 0, False) & (2**64 - 1) for k in keys]
    assert murmurhash3_x86_128_low64_array(np.array(keys, dtype=np.uint64)).tolist() == expected


def test_murmur_keeps_shape() -> None:
    keys = np.arange(12, dtype=np.uint64).reshape(3, 4)
    out = murmurhash3_x86_128_low64_array(keys)
    assert out.shape == (3, 4)
    assert int(out[0, 1]) == PUBLISHED[1][1]


def test_identity_published_vector() -> None:
    spec = ShardingSpec(preshift_bits=2, hash="identity", minishard_bits=3, shard_bits=3)
    assert spec.shard_and_minishard_of(0b10101010) == (5, 2)
    shard, minishard = spec.shard_and_minishard(np.array([0b10101010], dtype=np.uint64))
    assert (shard.tolist(), minishard.tolist()) == ([5], [2])


def test_murmur_hash_applies_preshift() -> None:
    spec = ShardingSpec(preshift_bits=3, hash="murmurhash3_x86_128", minishard_bits=0, shard_bits=0)
    assert spec.hash_id(42 << 3 | 0b101) == PUBLISHED[2][1]
    assert spec.hash_ids([42 << 3]).tolist() == [PUBLISHED[2][1]]


def test_preshift_64_hashes_zero() -> None:
    spec = ShardingSpec(
        preshift_bits=64, hash="murmurhash3_x86_128", minishard_bits=4, shard_bits=4
    )
    assert spec.hash_ids([0, 2**64 - 1, 12345]).tolist() == [PUBLISHED[0][1]] * 3
    assert spec.hash_id(2**64 - 1) == PUBLISHED[0][1]


@given(specs(), st.lists(U64, max_size=20))
def test_vectorised_mapping_matches_scalar(spec: ShardingSpec, ids: list[int]) -> None:
    shard, minishard = spec.shard_and_minishard(np.array(ids, dtype=np.uint64))
    assert list(zip(shard.tolist(), minishard.tolist(), strict=True)) == [
        spec.shard_and_minishard_of(i) for i in ids
    ]
    assert spec.hash_ids(np.array(ids, dtype=np.uint64)).tolist() == [spec.hash_id(i) for i in ids]
    for s, m in zip(shard.tolist(), minishard.tolist(), strict=True):
        assert 0 <= s < spec.num_shards
        assert 0 <= m < spec.num_minishards


def test_full_width_shard_bits() -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=64)
    assert spec.shard_and_minishard_of(2**64 - 1) == (2**64 - 1, 0)
    shard, minishard = spec.shard_and_minishard([2**64 - 1])
    assert (shard.tolist(), minishard.tolist()) == ([2**64 - 1], [0])
    assert spec.shard_filename(2**64 - 1) == "ffffffffffffffff.shard"


@pytest.mark.parametrize(
    "bad", [[-1], [1.5], ["a"], [2**64], [True], [0, 1.0], [-1, 2**63], np.array([1.0])]
)
def test_hash_ids_rejects_non_uint64(bad: list[Any]) -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=1, shard_bits=1)
    with pytest.raises(ValueError):
        spec.hash_ids(bad)


def test_hash_id_rejects_out_of_range() -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=1, shard_bits=1)
    with pytest.raises(ValueError):
        spec.hash_id(-1)
    with pytest.raises(ValueError):
        spec.hash_id(2**64)


# --------------------------------------------------------------------------- shard files


@pytest.mark.parametrize(
    ("shard_bits", "shard", "name"),
    [(0, 0, "0.shard"), (1, 1, "1.shard"), (4, 15, "f.shard"), (5, 5, "05.shard"),
     (8, 0xAB, "ab.shard"), (9, 5, "005.shard")],
)  # fmt: skip
def test_shard_filename(shard_bits: int, shard: int, name: str) -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=shard_bits)
    assert spec.shard_filename(shard) == name
    assert spec.parse_shard_filename(name) == shard


@pytest.mark.parametrize(
    ("shard_bits", "name"),
    [(0, "1.shard"), (0, "00.shard"), (1, "2.shard"), (4, "F.shard"), (5, "5.shard"),
     (5, "005.shard"), (5, "20.shard"), (8, "0x1.shard"), (8, "ab.index"), (8, "ab"),
     (8, "ab.shard/"), (8, " ab.shard"), (8, "-1.shard")],
)  # fmt: skip
def test_parse_shard_filename_rejects(shard_bits: int, name: str) -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=shard_bits)
    assert spec.parse_shard_filename(name) is None


def test_shard_filename_out_of_range() -> None:
    spec = ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=2)
    with pytest.raises(ValueError):
        spec.shard_filename(4)
    with pytest.raises(ValueError):
        spec.shard_filename(-1)


@given(specs(), U64)
def test_shard_filename_round_trip(spec: ShardingSpec, chunk_id: int) -> None:
    shard, _ = spec.shard_and_minishard_of(chunk_id)
    name = spec.shard_filename(shard)
    assert name == name.lower()
    assert len(name) == max(1, -(-spec.shard_bits // 4)) + len(".shard")
    assert spec.parse_shard_filename(name) == shard


# --------------------------------------------------------------------------- JSON


def test_json_round_trip() -> None:
    doc = sharding_json(hash="murmurhash3_x86_128", minishard_index_encoding="gzip")
    spec = ShardingSpec.from_json(doc)
    assert spec.hash == "murmurhash3_x86_128"
    assert spec.minishard_index_encoding == "gzip"
    assert spec.to_json() == doc
    assert ShardingSpec.from_json(spec.to_json()) == spec


def test_encodings_default_to_raw() -> None:
    spec = ShardingSpec.from_json(sharding_json(minishard_index_encoding=None, data_encoding=None))
    assert (spec.minishard_index_encoding, spec.data_encoding) == ("raw", "raw")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"@type": "neuroglancer_uint64_sharded_v2"}, "@type"),
        ({"@type": None}, "@type"),
        ({"preshift_bits": -1}, r"preshift_bits.*\[0, 64\]"),
        ({"preshift_bits": 65}, r"preshift_bits.*\[0, 64\]"),
        ({"preshift_bits": None}, "preshift_bits"),
        ({"preshift_bits": True}, "preshift_bits"),
        ({"preshift_bits": 1.0}, "preshift_bits"),
        ({"preshift_bits": "1"}, "preshift_bits"),
        ({"minishard_bits": 33}, r"minishard_bits.*\[0, 32\]"),
        ({"minishard_bits": None}, "minishard_bits"),
        ({"shard_bits": 62, "minishard_bits": 3}, r"shard_bits.*\[0, 61\]"),
        ({"shard_bits": -1}, "shard_bits"),
        ({"shard_bits": None}, "shard_bits"),
        ({"hash": "murmurhash3_x64_128"}, "hash.*identity"),
        ({"hash": None}, "hash"),
        ({"minishard_index_encoding": "zstd"}, "minishard_index_encoding.*gzip"),
        ({"data_encoding": "GZIP"}, "data_encoding"),
        ({"data_encoding": None, "minishard_index_encoding": 1}, "minishard_index_encoding"),
    ],
)
def test_invalid_json(overrides: dict[str, Any], message: str) -> None:
    doc = sharding_json(**overrides)
    with pytest.raises(InvalidMetadataError, match=message):
        ShardingSpec.from_json(doc)


@pytest.mark.parametrize("doc", [None, [], "sharding", 3])
def test_json_not_an_object(doc: object) -> None:
    with pytest.raises(InvalidMetadataError, match="sharding"):
        ShardingSpec.from_json(doc)


@given(
    st.sampled_from(["preshift_bits", "minishard_bits", "shard_bits"]),
    st.one_of(st.integers(max_value=-1), st.integers(min_value=65)),
)
def test_out_of_range_bits_rejected(field: str, value: int) -> None:
    with pytest.raises(InvalidMetadataError, match=field):
        ShardingSpec.from_json(sharding_json(**{field: value}))


def test_constructor_validates() -> None:
    with pytest.raises(InvalidMetadataError, match="preshift_bits"):
        ShardingSpec(preshift_bits=65, hash="identity", minishard_bits=0, shard_bits=0)
    with pytest.raises(InvalidMetadataError, match="hash"):
        ShardingSpec(preshift_bits=0, hash="md5", minishard_bits=0, shard_bits=0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Morton codes


@pytest.mark.parametrize(
    ("grid", "pos", "code"),
    [((3, 3, 3), (2, 2, 1), 0b011100), ((8, 8, 2), (5, 5, 0), 0b1100011),
     ((2, 3, 1), (1, 2, 0), 0b101), ((1, 1, 1), (0, 0, 0), 0)],
)  # fmt: skip
def test_morton_published_vectors(
    grid: tuple[int, int, int], pos: tuple[int, int, int], code: int
) -> None:
    assert int(compressed_morton_code(pos, grid)) == code
    assert tuple(decode_compressed_morton(code, grid).tolist()) == pos


def reference_morton(pos: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """The rule as written in the design notes, one bit at a time."""
    bits = [(g - 1).bit_length() for g in grid]
    code, j = 0, 0
    for i in range(max(bits)):
        for d in range(3):
            if i < bits[d]:
                code |= ((pos[d] >> i) & 1) << j
                j += 1
    return code


@st.composite
def grid_and_positions(draw: st.DrawFn) -> tuple[tuple[int, int, int], list[tuple[int, ...]]]:
    grid = tuple(draw(st.integers(1, 2**21)) for _ in range(3))
    positions = draw(
        st.lists(st.tuples(*(st.integers(0, g - 1) for g in grid)), min_size=1, max_size=10)
    )
    return (grid[0], grid[1], grid[2]), positions


@given(grid_and_positions())
def test_morton_matches_reference_and_inverts(
    case: tuple[tuple[int, int, int], list[tuple[int, ...]]],
) -> None:
    grid, positions = case
    codes = compressed_morton_code(np.array(positions), grid)
    assert codes.dtype == np.uint64
    assert codes.tolist() == [reference_morton(p, grid) for p in positions]
    assert [morton_code(p, grid) for p in positions] == codes.tolist()  # the table path
    assert [tuple(p) for p in decode_compressed_morton(codes, grid).tolist()] == positions


def test_morton_is_dense_for_power_of_two_grid() -> None:
    grid = (4, 2, 8)
    positions = np.stack(np.meshgrid(*(np.arange(g) for g in grid), indexing="ij"), -1)
    codes = compressed_morton_code(positions.reshape(-1, 3), grid)
    assert sorted(codes.tolist()) == list(range(64))


def test_morton_bits() -> None:
    assert compressed_morton_bits((1, 2, 3)) == (0, 1, 2)
    assert compressed_morton_bits((4, 5, 2**20)) == (2, 3, 20)


def test_morton_rejects_outside_grid() -> None:
    with pytest.raises(ValueError):
        compressed_morton_code((3, 0, 0), (3, 3, 3))
    with pytest.raises(ValueError):
        compressed_morton_code((-1, 0, 0), (3, 3, 3))
    with pytest.raises(ValueError):
        compressed_morton_code((0, 0), (3, 3, 3))
    with pytest.raises(ValueError):
        decode_compressed_morton(0b111111, (3, 3, 3))  # (3, 3, 3) is outside
    with pytest.raises(ValueError):
        decode_compressed_morton(1 << 6, (3, 3, 3))  # more bits than the code has
    with pytest.raises(ValueError):
        decode_compressed_morton(1, (1, 1, 1))


def test_morton_more_than_64_bits() -> None:
    grid = (2**22, 2**22, 2**22)
    with pytest.raises(InvalidMetadataError, match="64 bits"):
        compressed_morton_code((0, 0, 0), grid)
    full = (2**22, 2**21, 2**21)  # exactly 64 bits
    top = (2**22 - 1, 2**21 - 1, 2**21 - 1)
    assert int(compressed_morton_code(top, full)) == 2**64 - 1
    assert tuple(decode_compressed_morton(2**64 - 1, full).tolist()) == top
