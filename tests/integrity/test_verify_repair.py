"""``verify`` and ``repair`` on shards written by tensorstore and then damaged.

Each kind of damage (a truncated shard, a corrupt index, an out-of-range entry, a chunk
that fails its crc32c or its gzip stream) is found and named; ``repair`` keeps every
chunk that still reads, byte-identical, and ``verify`` passes afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
import tensorstore as ts
from click.testing import CliRunner

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.cli import cli
from asyncshard.errors import (
    InvalidMetadataError,
    NoShardedDataError,
    UnsupportedOperationError,
)
from asyncshard.formats.precomputed.shard import (
    decode_minishard_index,
    decode_shard_index,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.integrity import repair_async, verify_async
from asyncshard.sharding.volume import PrecomputedVolume
from asyncshard.sharding.zarr import ZarrShardedStore

SHARD_KEY = "arr/c/1/0"  # one of the four shards of the Zarr array (16 chunks each)
INDEX_NBYTES = 16 * 16 + 4


def write_zarr(root: Path, *, chunk_crc: bool = True) -> None:
    """A 64x64 uint16 array: 32x32 shards of 8x8 chunks, crc32c on index and chunks."""
    inner: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if chunk_crc:
        inner.append({"name": "crc32c"})
    codec = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [8, 8],
            "codecs": inner,
            "index_codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "crc32c"},
            ],
            "index_location": "end",
        },
    }
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / "arr")},
        "metadata": {
            "shape": [64, 64],
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
            "codecs": [codec],
        },
        "create": True,
    }
    data = (np.arange(64 * 64, dtype=np.uint16) + 1).reshape(64, 64)
    ts.open(spec).result().write(data).result()


async def zarr_chunks(root: Path) -> dict[str, bytes | None]:
    """Every inner chunk's stored bytes, by key, read through asyncshard."""
    store = await ZarrShardedStore.open(LocalStore(root), "arr")
    keys = [f"arr/c/{i}/{j}" for i in range(8) for j in range(8)]
    values = await store.get_partial_values([(k, None) for k in keys])
    return {k: None if v is None else bytes(v) for k, v in zip(keys, values, strict=True)}


def rewrite_index(path: Path, change: Callable[[np.ndarray[Any, Any]], None]) -> None:
    """Edit the (end) index of a Zarr shard file and store it with a valid crc32c."""
    raw = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(raw[-INDEX_NBYTES:-4]), dtype="<u8").reshape(16, 2).copy()
    change(index)
    body = index.astype("<u8").tobytes()
    raw[-INDEX_NBYTES:] = body + crc32c.crc32c(body).to_bytes(4, "little")
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def corrupt_index(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF
    path.write_bytes(bytes(raw))


def out_of_range(path: Path) -> None:
    size = path.stat().st_size
    rewrite_index(path, lambda index: index.__setitem__((5, 0), size + 100))


def corrupt_chunk(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(raw[-INDEX_NBYTES:-4]), dtype="<u8").reshape(16, 2)
    raw[int(index[5, 0]) + 3] ^= 0xFF
    path.write_bytes(bytes(raw))


ZARR_DAMAGE = [
    pytest.param(truncate, 0, "index", id="truncated"),
    pytest.param(corrupt_index, 0, "crc32c mismatch", id="corrupt-index"),
    pytest.param(out_of_range, 15, "outside the data region", id="out-of-range-entry"),
    pytest.param(corrupt_chunk, 15, "chunk crc32c mismatch", id="corrupt-chunk-crc32c"),
]


@pytest.mark.parametrize(("damage", "intact", "reason"), ZARR_DAMAGE)
async def test_zarr_damage_is_found_and_repaired(
    tmp_path: Path, damage: Callable[[Path], None], intact: int, reason: str
) -> None:
    write_zarr(tmp_path)
    before = await zarr_chunks(tmp_path)
    assert (await verify_async(str(tmp_path))).ok
    damage(tmp_path / SHARD_KEY)
    damaged_bytes = (tmp_path / SHARD_KEY).read_bytes()

    report = await verify_async(str(tmp_path))
    assert not report.ok and report.datasets == ["arr"] and report.shards == 4
    assert "1 dataset, 4 shards" in str(report) and "1 damaged shard:" in str(report)
    [found] = report.damaged
    assert (found.key, found.intact, found.action) == (SHARD_KEY, intact, None)
    assert reason in json.dumps(found.to_json())
    if intact:  # one chunk is named, the others still read
        assert list(found.lost) == ["arr/c/5/1"]  # index entry 5: position (1, 1)
    assert (tmp_path / SHARD_KEY).read_bytes() == damaged_bytes, "verify changed nothing"

    dry = await repair_async(str(tmp_path), dry_run=True)
    assert dry.damaged[0].action == "would be rewritten (dry run)"
    assert (tmp_path / SHARD_KEY).read_bytes() == damaged_bytes, "a dry run changes nothing"

    fixed = await repair_async(str(tmp_path))
    assert fixed.damaged[0].action is not None
    assert fixed.damaged[0].action.startswith("rewritten" if intact else "deleted")
    assert (await verify_async(str(tmp_path))).ok
    after = await zarr_chunks(tmp_path)
    lost = {k for k, v in after.items() if v is None}
    assert len(lost) == 16 - intact
    assert all(after[k] == before[k] for k in before if k not in lost), "intact chunks kept"
    # tensorstore reads the repaired array: lost chunks are the fill value, the rest equal
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "arr")}}
    values = ts.open(spec).result().read().result()
    expected = (np.arange(64 * 64, dtype=np.uint16) + 1).reshape(64, 64)
    assert np.array_equal(values[:32], expected[:32]) and np.array_equal(
        values[:, 32:], expected[:, 32:]
    )
    assert int((values[32:, :32] == 0).sum()) == 64 * (16 - intact)


async def test_repair_leaves_a_shard_changed_meanwhile_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite is conditional on the version inspected: a concurrent writer wins."""
    import asyncshard.integrity.scan as scan

    write_zarr(tmp_path)
    out_of_range(tmp_path / SHARD_KEY)
    real = scan._inspect

    async def then_another_writer(*args: Any) -> Any:
        inspected = await real(*args)
        if args[1] == SHARD_KEY:  # another process rewrites the shard after the read
            path = tmp_path / SHARD_KEY
            path.write_bytes(path.read_bytes())
        return inspected

    monkeypatch.setattr(scan, "_inspect", then_another_writer)
    report = await repair_async(str(tmp_path))
    assert report.damaged[0].action is not None
    assert report.damaged[0].action.startswith("left alone: the shard changed")


def write_precomputed(root: Path) -> ShardingSpec:
    """A 32^3 uint8 volume of 8^3 chunks (64), sharded in 4 shards, gzip chunk data."""
    sharding = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "identity",
        "minishard_bits": 1,
        "shard_bits": 2,
        "minishard_index_encoding": "raw",
        "data_encoding": "gzip",
    }
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(root)},
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
        "scale_metadata": {
            "size": [32, 32, 32],
            "chunk_size": [8, 8, 8],
            "encoding": "raw",
            "sharding": sharding,
        },
        "create": True,
    }
    data = (np.arange(32**3, dtype=np.uint32) % 251).astype(np.uint8).reshape(32, 32, 32, 1)
    ts.open(spec).result().write(data).result()
    return ShardingSpec.from_json(sharding)


async def precomputed_chunks(root: Path) -> dict[int, bytes]:
    scale = (await PrecomputedVolume.open(LocalStore(root))).scale("1_1_1")
    ids = [int(k) async for k in scale.store.list()]
    return await scale.store.get_chunks(ids)


def shard_file(root: Path) -> Path:
    return max((root / "1_1_1").glob("*.shard"), key=lambda p: p.stat().st_size)


def chunk_ranges(path: Path, spec: ShardingSpec) -> list[tuple[int, int]]:
    raw = path.read_bytes()
    table = decode_shard_index(raw[: shard_index_nbytes(spec)], spec)
    ranges: list[tuple[int, int]] = []
    for minishard in range(table.shape[0]):
        start, end = minishard_index_range(table, minishard)
        if end > start:
            mini = decode_minishard_index(raw[start:end], spec)
            ranges.extend(zip(mini.starts.tolist(), mini.ends.tolist(), strict=True))
    return ranges


@pytest.mark.parametrize(
    "damage",
    ["truncated", "corrupt-shard-index", "minishard-index-out-of-range", "corrupt-gzip-chunk"],
)
async def test_precomputed_damage_is_found_and_repaired(tmp_path: Path, damage: str) -> None:
    spec = write_precomputed(tmp_path)
    before = await precomputed_chunks(tmp_path)
    assert len(before) == 64 and (await verify_async(str(tmp_path), decode=True)).ok
    path = shard_file(tmp_path)
    raw = bytearray(path.read_bytes())
    if damage == "truncated":
        raw = raw[: len(raw) - 8]  # the minishard indexes at the end are cut
    elif damage == "minishard-index-out-of-range":  # its chunks are lost, the others kept
        raw[0:16] = (2**40).to_bytes(8, "little") + (2**40 + 8).to_bytes(8, "little")
    elif damage == "corrupt-shard-index":
        raw[0:16] = (16).to_bytes(8, "little") + (8).to_bytes(8, "little")  # start > end
    else:
        start, end = chunk_ranges(path, spec)[0]
        raw[start + 10 : end - 8] = bytes(end - 18 - start)  # inside the deflate stream
    path.write_bytes(bytes(raw))

    plain = await verify_async(str(tmp_path))
    decoded = await verify_async(str(tmp_path), decode=True)
    assert not decoded.ok and decoded.damaged[0].key.endswith(path.name)
    if damage == "corrupt-gzip-chunk":
        assert plain.ok, "the structure is intact: only decoding finds this"
        assert len(decoded.damaged[0].lost) == 1 and decoded.damaged[0].intact == 15
    else:
        assert not plain.ok and decoded.damaged[0].faults

    await repair_async(str(tmp_path), decode=True)
    assert (await verify_async(str(tmp_path), decode=True)).ok
    after = await precomputed_chunks(tmp_path)
    assert all(after[i] == before[i] for i in after), "intact chunks kept byte-identical"
    in_shard = {i for i in before if (i >> 1) & 3 == int(path.stem, 16)}  # identity hash
    lost = set(before) - set(after)
    assert lost and lost <= in_shard
    if damage == "corrupt-gzip-chunk":
        assert len(lost) == 1
    elif damage == "corrupt-shard-index":
        assert lost == in_shard


def test_the_commands_exit_1_on_damage_and_0_when_intact(tmp_path: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(cli, ["verify", str(tmp_path), "-q"])
    assert empty.exit_code == 2 and "NoShardedDataError" in empty.output
    write_zarr(tmp_path)
    ok = runner.invoke(cli, ["verify", str(tmp_path), "-q"])
    assert ok.exit_code == 0 and "all intact" in ok.output
    out_of_range(tmp_path / SHARD_KEY)
    bad = runner.invoke(cli, ["verify", str(tmp_path), "-q", "--json"])
    assert bad.exit_code == 1
    report = json.loads(bad.output)
    assert report["ok"] is False and report["damaged"][0]["key"] == SHARD_KEY
    assert runner.invoke(cli, ["repair", str(tmp_path), "-q", "--dry-run"]).exit_code == 1
    assert runner.invoke(cli, ["verify", str(tmp_path), "-q"]).exit_code == 1
    fixed = runner.invoke(cli, ["repair", str(tmp_path), "-q"])
    assert fixed.exit_code == 1, "a chunk is lost: damage remains"
    assert "rewritten with 15 intact chunks" in fixed.output
    assert runner.invoke(cli, ["verify", str(tmp_path), "-q"]).exit_code == 0


async def test_nothing_to_check_and_no_conditional_writes_are_typed_errors(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoShardedDataError):
        await verify_async(str(tmp_path / "empty"))
    write_zarr(tmp_path / "z")

    class NoConditions(MemoryStore):
        @property
        def supports_conditional_writes(self) -> bool:
            return False

    store = NoConditions()
    for path in (tmp_path / "z").rglob("*"):
        if path.is_file():
            await store.set(str(path.relative_to(tmp_path / "z")), path.read_bytes())
    assert (await verify_async(store)).ok
    with pytest.raises(UnsupportedOperationError):
        await repair_async(store)
    with pytest.raises(InvalidMetadataError, match="not a sharded Zarr v3 array"):
        await verify_async(store, ["nope"])
    write_precomputed(tmp_path / "p")
    with pytest.raises(InvalidMetadataError, match="no sharded scale 'nope'"):
        await verify_async(str(tmp_path / "p"), ["nope"])
    assert (await verify_async(str(tmp_path / "p"), ["1_1_1"])).datasets == ["1_1_1"]
