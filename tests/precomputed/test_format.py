"""Shard format: shard index, minishard index, chunk data, shard building."""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncshard.buffers import BytesLike
from asyncshard.errors import AsyncShardError, CorruptShardError
from asyncshard.formats.precomputed.shard import (
    MinishardIndex,
    build_shard,
    build_shards,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    encode_minishard_index,
    encode_shard_index,
    find_chunks,
    gunzip_bounded,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec

U64 = st.integers(0, 2**64 - 1)
ENCODINGS = ["raw", "gzip"]


def make_spec(
    *,
    minishard_bits: int = 2,
    shard_bits: int = 2,
    hash: Any = "identity",
    index: Any = "raw",
    data: Any = "raw",
    preshift_bits: int = 0,
) -> ShardingSpec:
    return ShardingSpec(
        preshift_bits=preshift_bits,
        hash=hash,
        minishard_bits=minishard_bits,
        shard_bits=shard_bits,
        minishard_index_encoding=index,
        data_encoding=data,
    )


def u64le(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def read_all(shard: bytes, spec: ShardingSpec, key: str = "k") -> dict[int, bytes]:
    """Every chunk of a shard, through the public decoders."""
    n = shard_index_nbytes(spec)
    index = decode_shard_index(shard[:n], spec, key=key, shard_size=len(shard))
    out: dict[int, bytes] = {}
    for minishard in range(spec.num_minishards):
        start, end = minishard_index_range(index, minishard)
        if start == end:
            continue
        ids, starts, ends = decode_minishard_index(
            shard[start:end], spec, key=key, shard_size=len(shard)
        )
        for i, s, e in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
            assert spec.shard_and_minishard_of(i)[1] == minishard
            out[i] = decode_chunk_data(shard[s:e], spec, key=key)
    return out


# --------------------------------------------------------------------------- hand-made vectors


def test_decode_hand_encoded_shard() -> None:
    """A shard written byte by byte from the spec text, independent of the encoder."""
    spec = make_spec(minishard_bits=1, shard_bits=0)
    # shard index: 2 entries = 32 bytes. Data: chunk 5 "aaa" at rel 0, chunk 9 "bb" at rel 3,
    # then the minishard 1 index (ids 5, 9 -> both odd: minishard 1) at rel 5.
    mini = u64le(5, 4) + u64le(0, 0) + u64le(3, 2)  # ids delta, offset delta, sizes
    shard = u64le(0, 0, 5, 5 + len(mini)) + b"aaabb" + mini
    assert read_all(shard, spec) == {5: b"aaa", 9: b"bb"}
    ids, starts, ends = decode_minishard_index(mini, spec)
    assert (ids.tolist(), starts.tolist(), ends.tolist()) == ([5, 9], [32, 35], [35, 37])
    assert minishard_index_range(decode_shard_index(shard[:32], spec), 1) == (37, 37 + 48)


def test_offset_deltas_relative_to_previous_end() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0)
    mini = u64le(1, 1, 1) + u64le(10, 2, 0) + u64le(4, 5, 6)
    ids, starts, ends = decode_minishard_index(mini, spec)
    assert ids.tolist() == [1, 2, 3]
    assert starts.tolist() == [16 + 10, 16 + 16, 16 + 21]
    assert ends.tolist() == [16 + 14, 16 + 21, 16 + 27]


def test_unsorted_minishard_is_sorted_like_tensorstore() -> None:
    """Deltas wrap modulo 2**64, so a writer may list chunks out of id or offset order."""
    spec = make_spec(minishard_bits=0, shard_bits=0)

    def minus(v: int) -> int:
        return (-v) % 2**64

    # chunk 9 at rel [10, 12), chunk 4 at rel [0, 3)
    mini = u64le(9, minus(5)) + u64le(10, minus(12)) + u64le(2, 3)
    ids, starts, ends = decode_minishard_index(mini, spec)
    assert ids.tolist() == [4, 9]
    assert starts.tolist() == [16, 26]
    assert ends.tolist() == [19, 28]
    assert encode_minishard_index([9, 4], [26, 16], [28, 19], spec) == mini


def test_empty_shard_index_entries_are_zero() -> None:
    spec = make_spec(minishard_bits=2, shard_bits=0)
    shard = build_shard({0: b"x"}, spec)
    index = decode_shard_index(shard[:64], spec)
    assert index[1:].tolist() == [[0, 0]] * 3
    assert index[0, 0] == 1  # the data of chunk 0 comes first


# --------------------------------------------------------------------------- round trips


@st.composite
def shard_cases(draw: st.DrawFn) -> tuple[ShardingSpec, dict[int, bytes]]:
    spec = make_spec(
        minishard_bits=draw(st.integers(0, 4)),
        shard_bits=draw(st.integers(0, 3)),
        hash=draw(st.sampled_from(["identity", "murmurhash3_x86_128"])),
        index=draw(st.sampled_from(ENCODINGS)),
        data=draw(st.sampled_from(ENCODINGS)),
        preshift_bits=draw(st.integers(0, 3)),
    )
    chunks = draw(st.dictionaries(U64, st.binary(max_size=40), max_size=30))
    return spec, chunks


@settings(max_examples=150)
@given(shard_cases())
def test_build_shards_round_trip(case: tuple[ShardingSpec, dict[int, bytes]]) -> None:
    spec, chunks = case
    shards = build_shards(chunks, spec)
    decoded: dict[int, bytes] = {}
    for name, shard in shards.items():
        shard_number = spec.parse_shard_filename(name)
        assert shard_number is not None
        found = read_all(shard, spec, key=name)
        assert {spec.shard_and_minishard_of(i)[0] for i in found} == {shard_number}
        decoded.update(found)
    assert decoded == chunks


@given(st.dictionaries(U64, st.binary(max_size=20), max_size=20))
def test_build_shard_single_shard_layout(chunks: dict[int, bytes]) -> None:
    spec = make_spec(minishard_bits=3, shard_bits=0)
    shard = build_shard(chunks, spec)
    assert read_all(shard, spec) == chunks
    # Data of a minishard is written in id order, right after the previous minishard.
    index = decode_shard_index(shard[:128], spec)
    for minishard in range(8):
        start, end = minishard_index_range(index, minishard)
        if start != end:
            _, starts, ends = decode_minishard_index(shard[start:end], spec)
            assert np.all(starts[1:] == ends[:-1])
            assert int(ends[-1]) == start


def test_gzip_data_is_gzip_and_deterministic() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0, index="gzip", data="gzip")
    shard = build_shard({7: b"hello" * 100}, spec)
    assert shard == build_shard({7: b"hello" * 100}, spec)
    (start, end) = minishard_index_range(decode_shard_index(shard[:16], spec), 0)
    mini = shard[start:end]
    assert mini[:2] == b"\x1f\x8b"
    _, starts, ends = decode_minishard_index(mini, spec)
    data = shard[int(starts[0]) : int(ends[0])]
    assert gzip.decompress(data) == b"hello" * 100


def test_build_shard_rejects_several_shards() -> None:
    spec = make_spec(minishard_bits=1, shard_bits=1)
    with pytest.raises(ValueError, match="shards"):
        build_shard({0: b"a", 2: b"b"}, spec)


def test_build_shard_empty_and_inputs() -> None:
    spec = make_spec(minishard_bits=2, shard_bits=1)
    assert build_shard({}, spec) == bytes(64)
    assert build_shards({}, spec) == {}
    chunks: dict[Any, BytesLike] = {np.uint64(4): memoryview(b"abc"), 2**64 - 2: bytearray(b"de")}
    shard = build_shard(chunks, spec)
    assert read_all(shard, spec) == {4: b"abc", 2**64 - 2: b"de"}
    with pytest.raises(ValueError):
        build_shard({-1: b"x"}, spec)


def test_build_shards_names() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=5)
    shards = build_shards({1: b"a", 2: b"b", 33: b"c"}, spec)
    assert sorted(shards) == ["01.shard", "02.shard"]
    assert read_all(shards["01.shard"], spec) == {1: b"a", 33: b"c"}


@given(st.lists(st.tuples(U64, st.integers(0, 2**20)), max_size=20, unique_by=lambda t: t[0]))
def test_minishard_index_encode_decode(entries: list[tuple[int, int]]) -> None:
    spec = make_spec(minishard_bits=1, shard_bits=0, index="gzip")
    entries.sort()
    ids = [i for i, _ in entries]
    starts, ends, pos = [], [], 32
    for _, size in entries:
        starts.append(pos)
        pos += size
        ends.append(pos)
    encoded = encode_minishard_index(ids, starts, ends, spec)
    got = decode_minishard_index(encoded, spec, shard_size=pos)
    assert (got.ids.tolist(), got.starts.tolist(), got.ends.tolist()) == (ids, starts, ends)


def test_encode_shard_index() -> None:
    assert encode_shard_index([[1, 2], [3, 4]]) == u64le(1, 2, 3, 4)


# --------------------------------------------------------------------------- find_chunks


def test_find_chunks() -> None:
    ids = np.array([3, 8, 2**64 - 1], dtype=np.uint64)
    starts = np.array([16, 20, 30], dtype=np.uint64)
    ends = np.array([20, 30, 31], dtype=np.uint64)
    index = MinishardIndex(ids, starts, ends)
    assert find_chunks(index, [8, 2**64 - 1, 0, 4, 9, 3]) == [
        (20, 30),
        (30, 31),
        None,
        None,
        None,
        (16, 20),
    ]
    empty = np.zeros(0, dtype=np.uint64)
    assert find_chunks(MinishardIndex(empty, empty, empty), [0, 1]) == [None, None]


# --------------------------------------------------------------------------- validation


def test_shard_index_validation() -> None:
    spec = make_spec(minishard_bits=1, shard_bits=0)
    with pytest.raises(CorruptShardError, match="31 bytes") as info:
        decode_shard_index(bytes(31), spec, key="s/0.shard")
    assert info.value.key == "s/0.shard"
    assert "s/0.shard" in str(info.value)
    with pytest.raises(CorruptShardError, match="start > end"):
        decode_shard_index(u64le(0, 0, 5, 4), spec, key="k")
    with pytest.raises(CorruptShardError, match="past the shard"):
        decode_shard_index(u64le(0, 0, 0, 10), spec, key="k", shard_size=41)
    assert decode_shard_index(u64le(0, 0, 0, 10), spec, shard_size=42).tolist() == [
        [0, 0],
        [0, 10],
    ]
    with pytest.raises(CorruptShardError, match="past the shard"):  # absolute end > 2**64 - 1
        decode_shard_index(u64le(0, 0, 0, 2**64 - 32), spec, key="k")


def test_minishard_index_validation() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0)
    with pytest.raises(CorruptShardError, match="multiple of 24") as info:
        decode_minishard_index(bytes(25), spec, key="a/1.shard")
    assert info.value.key == "a/1.shard"
    with pytest.raises(CorruptShardError, match="twice"):
        decode_minishard_index(u64le(5, 0) + u64le(0, 0) + u64le(1, 1), spec, key="k")
    with pytest.raises(CorruptShardError, match="overflows"):
        decode_minishard_index(u64le(1, 1) + u64le(0, 0) + u64le(2**64 - 1, 2), spec, key="k")
    with pytest.raises(CorruptShardError, match="past the shard"):
        decode_minishard_index(u64le(1) + u64le(0) + u64le(2**64 - 16), spec, key="k")
    mini = u64le(1) + u64le(4) + u64le(6)  # chunk at absolute [20, 26)
    with pytest.raises(CorruptShardError, match="past the shard"):
        decode_minishard_index(mini, spec, key="k", shard_size=25)
    assert decode_minishard_index(mini, spec, shard_size=26).ends.tolist() == [26]
    assert decode_minishard_index(b"", spec).ids.size == 0


def test_gzip_minishard_index_corrupt_names_key() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0, index="gzip")
    with pytest.raises(CorruptShardError, match="gzip") as info:
        decode_minishard_index(b"not gzip at all", spec, key="x/3.shard")
    assert info.value.key == "x/3.shard"
    good = gzip.compress(u64le(1, 2, 3))
    with pytest.raises(CorruptShardError, match="truncated"):
        decode_minishard_index(good[:-3], spec, key="k")
    with pytest.raises(CorruptShardError, match="multiple of 24"):
        decode_minishard_index(gzip.compress(b"x" * 23), spec, key="k")


def test_chunk_data_decoding() -> None:
    raw_spec = make_spec(minishard_bits=0, shard_bits=0)
    gz_spec = make_spec(minishard_bits=0, shard_bits=0, data="gzip")
    data = b"payload"
    assert decode_chunk_data(data, raw_spec) is data
    assert decode_chunk_data(memoryview(data), raw_spec) == data
    assert decode_chunk_data(gzip.compress(data), gz_spec) == data
    # Several gzip members concatenate, as gzip(1) does.
    assert decode_chunk_data(gzip.compress(b"ab") + gzip.compress(b"cd"), gz_spec) == b"abcd"
    with pytest.raises(CorruptShardError) as info:
        decode_chunk_data(b"\x1f\x8bjunk", gz_spec, key="c")
    assert info.value.key == "c"
    with pytest.raises(CorruptShardError):
        decode_chunk_data(gzip.compress(data) + b"trailing", gz_spec, key="c")
    with pytest.raises(CorruptShardError):
        decode_chunk_data(b"", gz_spec, key="c")


def test_decompression_is_bounded() -> None:
    bomb = gzip.compress(bytes(10_000_000))
    assert len(bomb) < 20_000
    gz_spec = make_spec(minishard_bits=0, shard_bits=0, data="gzip", index="gzip")
    with pytest.raises(CorruptShardError, match="past 1000 bytes"):
        decode_chunk_data(bomb, gz_spec, key="c", max_nbytes=1000)
    with pytest.raises(CorruptShardError, match="past 2400 bytes"):
        decode_minishard_index(bomb, gz_spec, key="c", max_nbytes=2400)
    members = gzip.compress(bytes(600)) + gzip.compress(bytes(600))
    with pytest.raises(CorruptShardError, match="past 1000"):
        gunzip_bounded(members, 1000)
    assert gunzip_bounded(members, 1200) == bytes(1200)
    assert gunzip_bounded(gzip.compress(b""), 0) == b""


def test_zlib_stream_is_not_gzip() -> None:
    gz_spec = make_spec(minishard_bits=0, shard_bits=0, data="gzip")
    with pytest.raises(CorruptShardError):
        decode_chunk_data(zlib.compress(b"abc"), gz_spec)


# --------------------------------------------------------------------------- fuzzing


@given(st.binary(max_size=200), st.sampled_from(ENCODINGS), st.integers(0, 3))
def test_random_bytes_raise_only_asyncshard_errors(
    data: bytes, encoding: str, minishard_bits: int
) -> None:
    spec = make_spec(minishard_bits=minishard_bits, shard_bits=0, index=encoding, data=encoding)
    for decode in (
        lambda: decode_shard_index(data, spec, key="k", shard_size=len(data) + 7),
        lambda: decode_minishard_index(data, spec, key="k", shard_size=len(data) * 3),
        lambda: decode_minishard_index(data, spec, key="k"),
        lambda: decode_chunk_data(data, spec, key="k", max_nbytes=1000),
    ):
        with contextlib.suppress(AsyncShardError):
            decode()


@given(st.binary(max_size=120))
def test_random_gzip_payload_raises_only_asyncshard_errors(payload: bytes) -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0, index="gzip")
    try:
        index = decode_minishard_index(gzip.compress(payload), spec, key="k", shard_size=500)
    except AsyncShardError:
        return
    assert bool(np.all(index.starts <= index.ends))
    assert bool(np.all(index.ends <= 500))
    assert bool(np.all(index.ids[1:] > index.ids[:-1]))


def test_encode_minishard_index_validates() -> None:
    spec = make_spec(minishard_bits=0, shard_bits=0)
    with pytest.raises(ValueError, match="same length"):
        encode_minishard_index([1, 2], [16], [17], spec)
    with pytest.raises(ValueError, match="start <= end"):
        encode_minishard_index([1], [15], [17], spec)
    with pytest.raises(ValueError, match="start <= end"):
        encode_minishard_index([1], [18], [17], spec)
    assert encode_minishard_index([], [], [], spec) == b""
