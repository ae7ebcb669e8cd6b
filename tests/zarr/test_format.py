"""Tests for asyncshard.formats.zarr3.shard: index and shard encoding, validation, oracles."""

from __future__ import annotations

import contextlib
import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from unittest import mock

import crc32c
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asyncshard.errors import AsyncShardError, ChecksumError, CorruptShardError
from asyncshard.formats.zarr3 import shard as shard_module
from asyncshard.formats.zarr3.grid import ShardingLayout
from asyncshard.formats.zarr3.metadata import parse_zarr3_array
from asyncshard.formats.zarr3.shard import (
    EMPTY,
    IndexLayout,
    IndexRange,
    chunk_slices,
    decode_index,
    decode_shard,
    empty_index,
    encode_index,
    encode_shard,
    index_byte_range,
    morton_order,
    present_mask,
)
from tests.zarr.helpers import array_doc

Location = Literal["start", "end"]
Endian = Literal["little", "big"]

# --------------------------------------------------------------------------- helpers


def make_chunks(
    cps: tuple[int, ...], seed: int, missing: float = 0.3
) -> dict[tuple[int, ...], bytes]:
    """Random chunk payloads of varying length at a random subset of positions."""
    rng = np.random.default_rng(seed)
    out: dict[tuple[int, ...], bytes] = {}
    for pos in np.ndindex(*cps):
        if rng.random() >= missing:
            out[pos] = rng.bytes(int(rng.integers(0, 40)))
    if not out:
        out[(0,) * len(cps)] = b"only"
    return out


def read_array_from_shards(root: Path, layout: ShardingLayout, dtype: str) -> npt.NDArray[Any]:
    """Assemble an array from shard files using only this package (inner codec: bytes)."""
    out = np.zeros(layout.shape, dtype=dtype)
    for shard in np.ndindex(*layout.shard_grid_shape):
        path = root / layout.shard_key(shard)
        if not path.exists():
            continue
        key = layout.shard_key(shard)
        chunks = decode_shard(path.read_bytes(), layout.index, key=key)
        for pos, view in chunks.items():
            coords = layout.grid.chunk_coords(shard, pos)
            assert layout.grid.chunk_in_bounds(coords), f"{key}: chunk {coords} outside the array"
            block = np.frombuffer(view, dtype=dtype).reshape(layout.chunk_shape)
            sel = tuple(
                slice(c * n, min((c + 1) * n, s))
                for c, n, s in zip(coords, layout.chunk_shape, layout.shape, strict=True)
            )
            out[sel] = block[tuple(slice(0, s.stop - s.start) for s in sel)]
    return out


def write_array_as_shards(
    root: Path, layout: ShardingLayout, data: npt.NDArray[Any], dtype: str
) -> None:
    """Write ``data`` as uncompressed shards (bytes codec, little-endian) with this package."""
    cs = layout.chunk_shape
    for shard in np.ndindex(*layout.shard_grid_shape):
        chunks: dict[tuple[int, ...], bytes] = {}
        for coords in layout.grid.chunks_in_object(shard):
            block = np.zeros(cs, dtype=dtype)
            sel = tuple(
                slice(c * n, min((c + 1) * n, s))
                for c, n, s in zip(coords, cs, layout.shape, strict=True)
            )
            part = data[sel]
            block[tuple(slice(0, k) for k in part.shape)] = part
            if block.any():
                chunks[layout.grid.object_of(coords)[1]] = block.astype(dtype).tobytes()
        if chunks:
            path = root / layout.shard_key(shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_shard(chunks, layout.index))


def sharded_zarr_json(
    shape: list[int],
    shard_shape: list[int],
    chunk_shape: list[int],
    dtype: str,
    *,
    location: Location = "end",
    endian: Endian = "little",
    checksum: bool = True,
) -> dict[str, Any]:
    """A zarr.json for an uncompressed sharded array, written by hand."""
    return array_doc(
        shape,
        shard_shape,
        chunk_shape,
        index_location=location,
        endian=endian,
        checksum=checksum,
        dtype=dtype,
    )


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> npt.NDArray[Any]:
    """Test data with some all-zero regions, so that some chunks are missing."""
    rng = np.random.default_rng(seed)
    data = rng.integers(1, 1000, size=shape).astype(dtype)
    if data.ndim:
        data[: max(1, shape[0] // 3)] = 0
    return data


# --------------------------------------------------------------------------- spec facts


def test_crc32c_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_index_size_spec_example() -> None:
    # Shard [64, 64], inner chunks [32, 32], bytes little + crc32c: 16 * 4 + 4 = 68 bytes.
    layout = IndexLayout((2, 2))
    assert layout.n_chunks == 4
    assert layout.index_nbytes == 68
    assert IndexLayout((2, 2), checksum=False).index_nbytes == 64
    # Draft transformer, chunks_per_shard [32, 2]: 16 * 64 bytes (the spec's "1014" is a typo).
    assert IndexLayout((32, 2), checksum=False).index_nbytes == 1024


def test_index_bytes_match_spec_table() -> None:
    index = np.array([[[0, 10], [EMPTY, EMPTY]], [[10, 5], [15, 1]]], dtype=np.uint64)
    raw = encode_index(index, IndexLayout((2, 2)))
    body = struct.pack("<8Q", 0, 10, EMPTY, EMPTY, 10, 5, 15, 1)
    assert raw == body + struct.pack("<I", crc32c.crc32c(body))
    big = encode_index(index, IndexLayout((2, 2), endian="big", checksum=False))
    assert big == struct.pack(">8Q", 0, 10, EMPTY, EMPTY, 10, 5, 15, 1)
    flat = encode_index(index.reshape(4, 2), IndexLayout((2, 2)))
    assert flat == raw


def test_index_layout_validation() -> None:
    with pytest.raises(ValueError):
        IndexLayout((0, 2))
    with pytest.raises(ValueError):
        IndexLayout([2, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        IndexLayout((2,), location="middle")  # type: ignore[arg-type]
    assert IndexLayout((np.int64(3),)).chunks_per_shard == (3,)  # type: ignore[arg-type]
    assert type(IndexLayout((np.int64(3),)).chunks_per_shard[0]) is int  # type: ignore[arg-type]


# --------------------------------------------------------------------------- morton order


def test_morton_order_2x2() -> None:
    # Dimension 0 takes the lowest bit, as in zarr-python and neuroglancer.
    assert morton_order((2, 2)).tolist() == [[0, 0], [1, 0], [0, 1], [1, 1]]


def test_morton_order_4x4() -> None:
    expected = [
        (0, 0), (1, 0), (0, 1), (1, 1),
        (2, 0), (3, 0), (2, 1), (3, 1),
        (0, 2), (1, 2), (0, 3), (1, 3),
        (2, 2), (3, 2), (2, 3), (3, 3),
    ]  # fmt: skip
    assert [tuple(p) for p in morton_order((4, 4)).tolist()] == expected


def test_morton_order_non_power_of_two() -> None:
    # code = x0 | y0 << 1 | x1 << 2 | y1 << 3, codes of points outside (3, 3) skipped
    expected_3x3 = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1), (0, 2), (1, 2), (2, 2)]
    assert [tuple(p) for p in morton_order((3, 3)).tolist()] == expected_3x3
    # bits (1, 2): code = x0 | y0 << 1 | y1 << 2
    expected_2x3 = [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [tuple(p) for p in morton_order((2, 3)).tolist()] == expected_2x3
    assert morton_order((5,)).tolist() == [[0], [1], [2], [3], [4]]
    assert morton_order((1, 1, 3)).tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 2]]
    assert morton_order(()).shape == (1, 0)


def test_morton_order_3d() -> None:
    first = [tuple(p) for p in morton_order((2, 2, 2)).tolist()]
    assert first == [
        (0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0),
        (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1),
    ]  # fmt: skip


@pytest.mark.parametrize("shape", [(2, 2), (3, 5), (4, 4, 4), (1, 7), (3, 2, 5), (6,), (2, 9, 3)])
def test_morton_order_matches_zarr_python(shape: tuple[int, ...], tmp_path: Path) -> None:
    """zarr-python lays a shard's chunks out in Morton order: read the order off a shard
    it wrote (one-byte chunks whose value is their C-order number + 1), through its public
    API only."""
    import zarr

    count = math.prod(shape)
    data = (np.arange(count, dtype="uint8") + 1).reshape(shape)
    arr = zarr.create_array(
        zarr.storage.LocalStore(tmp_path),
        shape=shape,
        chunks=(1,) * len(shape),
        shards=shape,
        dtype="uint8",
        fill_value=0,
        compressors=None,
    )
    arr[...] = data
    shard = (tmp_path / "c" / Path(*["0"] * len(shape))).read_bytes()
    written = [int(b) - 1 for b in shard[:count]]
    zarrs = [tuple(int(i) for i in np.unravel_index(n, shape)) for n in written]
    assert [tuple(p) for p in morton_order(shape).tolist()] == zarrs


@given(st.lists(st.integers(1, 6), min_size=0, max_size=4))
def test_morton_order_is_a_permutation(shape: list[int]) -> None:
    order = morton_order(shape)
    assert order.shape == (math.prod(shape), len(shape))
    assert len({tuple(p) for p in order.tolist()}) == math.prod(shape)
    assert not order.flags.writeable


# --------------------------------------------------------------------------- round trips

LAYOUT_CASES = [
    pytest.param((5,), id="1d"),
    pytest.param((2, 3), id="2d"),
    pytest.param((2, 2, 3), id="3d"),
    pytest.param((4, 4), id="4x4"),
]


@pytest.mark.parametrize("cps", LAYOUT_CASES)
@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("checksum", [True, False])
def test_shard_round_trip(
    cps: tuple[int, ...], location: Location, endian: Endian, checksum: bool
) -> None:
    layout = IndexLayout(cps, endian=endian, checksum=checksum, location=location)
    chunks = make_chunks(cps, seed=len(cps) + checksum)
    shard = encode_shard(chunks, layout)
    assert len(shard) == layout.index_nbytes + sum(len(v) for v in chunks.values())

    decoded = decode_shard(shard, layout, key="c/0")
    assert {p: bytes(v) for p, v in decoded.items()} == chunks

    rng = index_byte_range(layout)
    index = decode_index(shard[rng.as_slice()], layout, shard_size=len(shard))
    assert index.shape == (*cps, 2) and index.dtype == np.uint64
    assert present_mask(index).sum() == len(chunks)
    # data is back to back in Morton order; offsets are absolute in the object
    rank = {tuple(p): i for i, p in enumerate(morton_order(cps).tolist())}
    ordered = sorted(chunks, key=rank.__getitem__)
    offset = layout.index_nbytes if location == "start" else 0
    for pos in ordered:
        assert tuple(index[pos].tolist()) == (offset, len(chunks[pos]))
        assert shard[offset : offset + len(chunks[pos])] == chunks[pos]
        offset += len(chunks[pos])
    for pos in np.ndindex(*cps):
        if pos not in chunks:
            assert index[pos].tolist() == [EMPTY, EMPTY]


def test_encode_shard_c_order() -> None:
    layout = IndexLayout((2, 2), checksum=False)
    chunks = {(1, 0): b"B", (0, 1): b"C", (0, 0): b"A", (1, 1): b"D"}
    assert encode_shard(chunks, layout, order="C")[:4] == b"ACBD"
    assert encode_shard(chunks, layout)[:4] == b"ABCD"  # morton: (0,0) (1,0) (0,1) (1,1)
    with pytest.raises(ValueError):
        encode_shard(chunks, layout, order="F")  # type: ignore[arg-type]


def test_encode_shard_accepts_buffers_and_empty_chunks() -> None:
    layout = IndexLayout((3,), location="start")
    chunks = {(0,): memoryview(b"xyz")[1:], (1,): bytearray(b""), (2,): np.arange(2, dtype="u1")}
    shard = encode_shard(chunks, layout)  # type: ignore[arg-type]
    decoded = decode_shard(shard, layout)
    assert {p: bytes(v) for p, v in decoded.items()} == {(0,): b"yz", (1,): b"", (2,): b"\0\1"}


def test_zero_dimensional_shard() -> None:
    layout = IndexLayout(())
    assert layout.n_chunks == 1 and layout.index_nbytes == 20
    shard = encode_shard({(): b"scalar"}, layout)
    assert {p: bytes(v) for p, v in decode_shard(shard, layout).items()} == {(): b"scalar"}
    assert list(chunk_slices(decode_index(shard[-20:], layout))) == [((), 0, 6)]


def test_decode_shard_is_zero_copy() -> None:
    layout = IndexLayout((2,))
    shard = encode_shard({(0,): b"hello", (1,): b"world"}, layout)
    views = decode_shard(shard, layout)
    assert all(isinstance(v, memoryview) and v.obj is shard for v in views.values())
    assert bytes(views[(1,)]) == b"world"
    buf = bytearray(shard)
    assert bytes(decode_shard(memoryview(buf), layout)[(0,)]) == b"hello"


def test_chunk_slices_and_present_mask() -> None:
    index = empty_index(IndexLayout((2, 2)))
    index[1, 0] = (7, 3)
    index[0, 1] = (0, 7)
    assert list(chunk_slices(index)) == [((0, 1), 0, 7), ((1, 0), 7, 3)]
    assert present_mask(index).tolist() == [[False, True], [True, False]]


def test_encode_shard_rejects_bad_input() -> None:
    layout = IndexLayout((2, 2))
    with pytest.raises(ValueError, match="delete"):
        encode_shard({}, layout)
    with pytest.raises(ValueError, match="outside"):
        encode_shard({(2, 0): b"x"}, layout)
    with pytest.raises(ValueError, match="outside"):
        encode_shard({(0, -1): b"x"}, layout)
    with pytest.raises(ValueError):
        encode_shard({(0,): b"x"}, layout)
    with pytest.raises(ValueError):
        encode_shard({(0, 1.0): b"x"}, layout)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="ints"):
        encode_shard({(0, 0): b"x", (True, 0): b"y"}, layout)
    with pytest.raises(ValueError, match="outside"):  # beyond int64: the same error
        encode_shard({(0, 0): b"x", (0, 2**70): b"y"}, layout)
    with pytest.raises(ValueError, match=r"\(1, 5\) is outside"):
        encode_shard({(0, 0): b"x", (1, 5): b"y"}, layout)  # the first bad one named
    numpy_keys = {(np.int32(1), np.uint8(1)): b"y", (0, 0): b"x"}
    assert encode_shard(numpy_keys, layout) == encode_shard({(0, 0): b"x", (1, 1): b"y"}, layout)


def test_encode_index_rejects_bad_input() -> None:
    layout = IndexLayout((2, 2))
    with pytest.raises(ValueError):
        encode_index(np.zeros((2, 3, 2), dtype=np.uint64), layout)
    with pytest.raises(ValueError):
        encode_index(np.full((2, 2, 2), -1, dtype=np.int64), layout)
    with pytest.raises(TypeError):
        encode_index(np.zeros((2, 2, 2), dtype=np.float64), layout)


def test_index_byte_range() -> None:
    end = IndexLayout((2, 2))
    assert index_byte_range(end) == IndexRange(None, 68)
    assert index_byte_range(end).is_suffix and index_byte_range(end).end is None
    assert index_byte_range(end, 1000) == IndexRange(932, 68)
    assert index_byte_range(end, 1000).end == 1000
    start = IndexLayout((2, 2), location="start")
    assert index_byte_range(start) == IndexRange(0, 68) == index_byte_range(start, 500)
    data = bytes(range(100))
    assert data[index_byte_range(end).as_slice()] == data[-68:]
    assert data[index_byte_range(start).as_slice()] == data[:68]
    with pytest.raises(CorruptShardError, match="c/1/2"):
        index_byte_range(end, 10, key="c/1/2")


# --------------------------------------------------------------------------- corrupt input


def _shard(location: Location = "end") -> tuple[bytes, IndexLayout]:
    layout = IndexLayout((2, 2), location=location)
    return encode_shard({(0, 0): b"aaaa", (1, 1): b"bbbbbb"}, layout), layout


def _with_index(index: npt.NDArray[np.uint64], layout: IndexLayout, data: bytes) -> bytes:
    raw = encode_index(index, layout)
    return raw + data if layout.location == "start" else data + raw


@pytest.mark.parametrize("location", ["start", "end"])
def test_flipped_index_byte_is_checksum_error(location: Location) -> None:
    shard, layout = _shard(location)
    pos = 3 if location == "start" else len(shard) - 30
    bad = bytearray(shard)
    bad[pos] ^= 0x01
    with pytest.raises(ChecksumError, match="data/c/0/1") as info:
        decode_shard(bytes(bad), layout, key="data/c/0/1")
    assert info.value.key == "data/c/0/1"
    assert isinstance(info.value, CorruptShardError)


def test_flipped_checksum_byte_is_checksum_error() -> None:
    shard, layout = _shard()
    bad = shard[:-1] + bytes([shard[-1] ^ 0x80])
    with pytest.raises(ChecksumError, match="k"):
        decode_index(bad[-68:], layout, key="k")


def test_truncated_shard_is_corrupt() -> None:
    shard, layout = _shard()
    with pytest.raises(CorruptShardError, match="the/key") as info:
        decode_shard(shard[:-1], layout, key="the/key")
    assert not isinstance(info.value, ChecksumError) or info.value.key == "the/key"
    with pytest.raises(CorruptShardError):
        decode_shard(shard[:40], layout)
    with pytest.raises(CorruptShardError):
        decode_shard(b"", layout)
    # truncated at the front (index at end intact) -> chunks now past the data region
    with pytest.raises(CorruptShardError, match="outside"):
        decode_shard(shard[3:], layout)


def test_wrong_index_size_is_corrupt() -> None:
    _, layout = _shard()
    raw = encode_index(empty_index(layout), layout)
    with pytest.raises(CorruptShardError, match="67 bytes, expected 68"):
        decode_index(raw[:-1], layout, key="k")
    with pytest.raises(CorruptShardError, match="expected 68"):
        decode_index(raw + b"\0", layout)
    with pytest.raises(CorruptShardError, match="smaller than"):
        decode_index(raw, layout, shard_size=10)


def test_offset_past_end_is_corrupt() -> None:
    layout = IndexLayout((2, 2))
    index = empty_index(layout)
    index[0, 1] = (2, 9)  # data region is 10 bytes: [2, 11) ends past it
    shard = _with_index(index, layout, b"0123456789")
    with pytest.raises(CorruptShardError, match=r"chunk \(0, 1\).*outside") as info:
        decode_shard(shard, layout, key="c/5/5")
    assert info.value.key == "c/5/5"
    index[0, 1] = (2, 8)
    assert bytes(decode_shard(_with_index(index, layout, b"0123456789"), layout)[(0, 1)]) == (
        b"23456789"
    )


def test_chunk_inside_index_region_is_corrupt() -> None:
    layout = IndexLayout((2,), location="start")
    index = empty_index(layout)
    index[1] = (layout.index_nbytes - 1, 2)  # starts inside the index
    with pytest.raises(CorruptShardError, match="outside"):
        decode_shard(_with_index(index, layout, b"xyz"), layout)
    end_layout = IndexLayout((2,))
    index = empty_index(end_layout)
    index[0] = (2, 2)  # reaches into the index at the end
    with pytest.raises(CorruptShardError, match="outside"):
        decode_shard(_with_index(index, end_layout, b"xyz"), end_layout)


@pytest.mark.parametrize("entry", [(EMPTY, 4), (0, EMPTY)])
def test_half_empty_entry_is_corrupt(entry: tuple[int, int]) -> None:
    layout = IndexLayout((2, 2))
    index = empty_index(layout)
    index[1, 0] = entry
    with pytest.raises(CorruptShardError, match=r"\(1, 0\) is half empty"):
        decode_index(encode_index(index, layout), layout, key="k")


def test_overflowing_entry_is_corrupt() -> None:
    layout = IndexLayout((1,), checksum=False)
    index = np.array([[EMPTY - 5, 10]], dtype=np.uint64)
    with pytest.raises(CorruptShardError, match="overflows"):
        decode_index(encode_index(index, layout), layout)


def test_decode_index_without_shard_size_skips_bounds() -> None:
    layout = IndexLayout((1,))
    index = np.array([[10**12, 5]], dtype=np.uint64)
    decoded = decode_index(encode_index(index, layout), layout)
    assert decoded.tolist() == [[10**12, 5]]
    assert decoded.flags.writeable


# --------------------------------------------------------------------------- hypothesis


def index_layouts(max_side: int) -> st.SearchStrategy[IndexLayout]:
    return st.builds(
        IndexLayout,
        chunks_per_shard=st.lists(st.integers(1, max_side), min_size=0, max_size=3).map(tuple),
        endian=st.sampled_from(["little", "big"]),
        checksum=st.booleans(),
        location=st.sampled_from(["start", "end"]),
    )


layouts = index_layouts(4)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts, data=st.binary(max_size=600), shard_size=st.none() | st.integers(0, 700))
def test_random_bytes_raise_only_our_errors(
    layout: IndexLayout, data: bytes, shard_size: int | None
) -> None:
    for call in (
        lambda: decode_index(data, layout, shard_size=shard_size, key="k"),
        lambda: decode_index(data[: layout.index_nbytes], layout, shard_size=shard_size),
        lambda: decode_shard(data, layout, key="k"),
    ):
        with contextlib.suppress(AsyncShardError):
            call()


entry_values = st.sampled_from([EMPTY, EMPTY - 1, 2**63, 0, 1]) | st.integers(0, 200)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=index_layouts(3),
    entries=st.lists(st.tuples(entry_values, entry_values), min_size=27, max_size=27),
    payload=st.binary(max_size=120),
)
def test_random_valid_checksum_indexes(
    layout: IndexLayout, entries: list[tuple[int, int]], payload: bytes
) -> None:
    """Well-formed index bytes with arbitrary entries: either a sane result or our error."""
    index = np.array(entries[: layout.n_chunks], dtype=np.uint64).reshape(
        (*layout.chunks_per_shard, 2)
    )
    shard = _with_index(index, layout, payload)
    try:
        chunks = decode_shard(shard, layout, key="k")
    except AsyncShardError as exc:
        assert isinstance(exc, CorruptShardError) and exc.key == "k"
        return
    lo, hi = layout.data_region(len(shard))
    for pos, view in chunks.items():
        off, n = (int(x) for x in index[pos])
        assert lo <= off and off + n <= hi and view.nbytes == n
        assert bytes(view) == shard[off : off + n]


@settings(max_examples=100, deadline=None)
@given(
    layout=layouts,
    seed=st.integers(0, 2**16),
    order=st.sampled_from(["morton", "C"]),
)
def test_round_trip_property(layout: IndexLayout, seed: int, order: Literal["morton", "C"]) -> None:
    chunks = make_chunks(layout.chunks_per_shard, seed)
    shard = encode_shard(chunks, layout, order=order)
    assert {p: bytes(v) for p, v in decode_shard(shard, layout).items()} == chunks


# --------------------------------------------------------------------------- oracles


def test_zarr_python_writes_we_read(tmp_path: Path) -> None:
    import zarr

    shape, dtype = (13, 10), "uint16"
    data = sample(shape, dtype)
    arr = zarr.create_array(
        store=str(tmp_path / "a"),
        shape=shape,
        chunks=(2, 3),
        shards=(4, 6),
        dtype=dtype,
        compressors=None,
        fill_value=0,
    )
    arr[...] = data
    layout = parse_zarr3_array(json.loads((tmp_path / "a" / "zarr.json").read_text()))
    assert (layout.shard_shape, layout.chunk_shape, layout.chunks_per_shard) == (
        (4, 6),
        (2, 3),
        (2, 2),
    )
    assert layout.index == IndexLayout((2, 2), endian="little", checksum=True, location="end")
    np.testing.assert_array_equal(read_array_from_shards(tmp_path / "a", layout, "<u2"), data)
    # rows 0..3 are fill: zarr-python writes no shard for them
    assert not (tmp_path / "a" / "c/0/0").exists()
    shard_files = [p for p in (tmp_path / "a" / "c").rglob("*") if p.is_file()]
    assert len(shard_files) == 6  # shard grid (4, 2) minus the all-fill row
    for shard_path in shard_files:
        raw = shard_path.read_bytes()
        index = decode_index(raw[-68:], layout.index, shard_size=len(raw))
        # edge shard (3, *) holds one row of inner chunks: the rest of its index is empty
        if shard_path.parent.name == "3":
            assert present_mask(index)[1].sum() == 0
        # zarr-python writes shards byte for byte as we do (Morton order, index at end)
        assert encode_shard(decode_shard(raw, layout.index), layout.index) == raw


def test_zarr_python_3d_index_start(tmp_path: Path) -> None:
    import zarr

    shape, dtype = (5, 6, 7), "int32"
    data = sample(shape, dtype, seed=3)
    arr = zarr.create_array(
        store=str(tmp_path / "b"),
        shape=shape,
        chunks=(1, 2, 3),
        shards=(2, 4, 6),
        dtype=dtype,
        compressors=None,
        fill_value=0,
    )
    arr[...] = data
    doc = json.loads((tmp_path / "b" / "zarr.json").read_text())
    layout = parse_zarr3_array(doc)
    np.testing.assert_array_equal(read_array_from_shards(tmp_path / "b", layout, "<i4"), data)


@pytest.mark.parametrize("location", ["start", "end"])
def test_tensorstore_writes_we_read(tmp_path: Path, location: Location) -> None:
    import tensorstore as ts

    shape, dtype = (9, 11), "uint32"
    data = sample(shape, dtype, seed=1)
    meta = sharded_zarr_json([9, 11], [4, 6], [2, 3], dtype, location=location)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "t")},
        "metadata": {k: meta[k] for k in ("shape", "data_type", "chunk_grid", "codecs")},
        "create": True,
    }
    store = ts.open(spec).result()
    store[...] = data
    doc = json.loads((tmp_path / "t" / "zarr.json").read_text())
    layout = parse_zarr3_array(doc)
    assert layout.index.location == location and layout.index.checksum
    np.testing.assert_array_equal(read_array_from_shards(tmp_path / "t", layout, "<u4"), data)


CONFIGS = [
    pytest.param("end", "little", True, id="end-le-crc"),
    pytest.param("start", "little", True, id="start-le-crc"),
    pytest.param("start", "big", False, id="start-be"),
    pytest.param("end", "big", True, id="end-be-crc"),
]


def _write_ours(
    root: Path, location: Location, endian: Endian, checksum: bool
) -> tuple[npt.NDArray[Any], dict[str, Any]]:
    shape, dtype = (7, 9, 5), "int16"
    data = sample(shape, dtype, seed=7)
    doc = sharded_zarr_json(
        list(shape),
        [4, 6, 4],
        [2, 3, 2],
        dtype,
        location=location,
        endian=endian,
        checksum=checksum,
    )
    root.mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps(doc))
    layout = parse_zarr3_array(doc)
    write_array_as_shards(root, layout, data, "<i2")
    return data, doc


@pytest.mark.parametrize(("location", "endian", "checksum"), CONFIGS)
def test_we_write_zarr_python_reads(
    tmp_path: Path, location: Location, endian: Endian, checksum: bool
) -> None:
    import zarr

    data, _ = _write_ours(tmp_path / "o", location, endian, checksum)
    got = zarr.open_array(str(tmp_path / "o"), mode="r")[...]
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize(("location", "endian", "checksum"), CONFIGS)
def test_we_write_tensorstore_reads(
    tmp_path: Path, location: Location, endian: Endian, checksum: bool
) -> None:
    import tensorstore as ts

    data, _ = _write_ours(tmp_path / "o", location, endian, checksum)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "o")}}
    got = ts.open(spec, open=True).result().read().result()
    np.testing.assert_array_equal(got, data)


def test_tensorstore_reads_single_inner_chunks(tmp_path: Path) -> None:
    """tensorstore's zarr3_sharding_indexed kvstore sees exactly our inner chunks."""
    import tensorstore as ts

    layout = IndexLayout((3, 2), location="start")
    chunks: Mapping[tuple[int, ...], bytes] = {(0, 1): b"first", (2, 0): b"second!", (1, 1): b""}
    (tmp_path / "shard").write_bytes(encode_shard(chunks, layout))
    kv = ts.KvStore.open(
        {
            "driver": "zarr3_sharding_indexed",
            "base": {"driver": "file", "path": str(tmp_path / "shard")},
            "grid_shape": [3, 2],
            "index_codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "crc32c"},
            ],
            "index_location": "start",
        }
    ).result()
    for pos in np.ndindex(3, 2):
        # keys are the big-endian uint32 grid coordinates
        key = b"".join(int(c).to_bytes(4, "big") for c in pos)
        value = kv.read(key).result()
        if pos in chunks:
            assert value.state == "value" and bytes(value.value) == chunks[pos]
        else:
            assert value.state == "missing"


_ENTRY_VALUES = st.one_of(
    st.sampled_from([0, 1, 60, 100, 2**63, 2**64 - 2, EMPTY]), st.integers(0, 2**64 - 1)
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_ENTRY_VALUES, _ENTRY_VALUES), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(0, 200), st.just(2**64 - 1)),
)
@example([(0, EMPTY)], None)  # half empty, though offset + nbytes fits in 64 bits
@example([(EMPTY, 0)], None)
@example([(2**63, 2**63)], None)  # overflows by one
@example([(2**63, 2**63 - 1), (EMPTY, EMPTY)], None)
@example([(0, 60), (60, 41)], 100)  # one byte past the data region
@example([(4, 1)], 100)  # inside the index when it comes first
@pytest.mark.parametrize("location", ["start", "end"])
def test_small_index_checks_agree_with_the_vectorised_ones(
    location: Location, entries: list[tuple[int, int]], shard_size: int | None
) -> None:
    """The Python check of small indexes refuses exactly what the numpy checks refuse,
    with their message: the same index decoded both ways."""
    layout = IndexLayout((len(entries),), location=location)
    raw = encode_index(np.array(entries, dtype=np.uint64), layout)
    size = None if shard_size is None else shard_size + layout.index_nbytes
    outcomes = []
    for small_index in (shard_module._SMALL_INDEX, 0):  # the Python check, then numpy only
        with mock.patch.object(shard_module, "_SMALL_INDEX", small_index):
            try:
                decode_index(raw, layout, shard_size=size)
                outcomes.append("valid")
            except (CorruptShardError, OverflowError) as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
    assert outcomes[0] == outcomes[1]
