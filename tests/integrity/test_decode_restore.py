"""``verify --decode`` through Zarr inner codecs, and ``repair --from SOURCE``."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from click.testing import CliRunner

from asyncshard.cli import cli
from asyncshard.convert import shard_store_async, unshard_precomputed_async
from asyncshard.errors import InvalidMetadataError
from asyncshard.integrity import repair_async, verify_async
from tests.convert.test_v2_codecs import _shard_chunks, _v2
from tests.integrity.test_verify_repair import precomputed_chunks, write_precomputed


async def _sharded_from_v2(
    tmp_path: Path, compressor: Any
) -> tuple[Path, Path, np.ndarray[Any, Any]]:
    """A v2 array (``src``) and its sharded copy (``dst``, no inner crc32c)."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 1000, size=(32, 32), dtype=np.uint16)
    source, dest = tmp_path / "src", tmp_path / "dst"
    _v2(source, data, (8, 8), compressors=compressor)
    await shard_store_async(source, (2, 2), to=dest)
    return source, dest, data


def _first_shard(dest: Path) -> Path:
    return dest / "c" / "0" / "0"


def _damage_a_chunk(dest: Path) -> None:
    """Overwrite the header of the first chunk's compressed stream (blosc has no
    checksum: damage to its body can decode to other values of the same size)."""
    path = _first_shard(dest)
    raw = bytearray(path.read_bytes())
    raw[0:12] = b"\xff" * 12
    path.write_bytes(bytes(raw))


def _codecs() -> dict[str, Any]:
    import numcodecs

    return {
        "zstd": numcodecs.Zstd(level=3),
        "gzip": numcodecs.GZip(level=5),
        "blosc": numcodecs.Blosc(cname="lz4", shuffle=1),
    }


@pytest.mark.parametrize("codec", list(_codecs()))
async def test_decode_finds_what_the_structure_hides(codec: str, tmp_path: Path) -> None:
    _, dest, _ = await _sharded_from_v2(tmp_path, _codecs()[codec])
    assert (await verify_async(dest, decode=True)).ok
    _damage_a_chunk(dest)
    assert (await verify_async(dest)).ok, "no checksum: the structure is intact"
    report = await verify_async(dest, decode=True)
    assert not report.ok
    [damaged] = report.damaged
    assert list(damaged.lost) == ["c/0/0"] and damaged.intact == 3
    assert report.decoded


async def test_decode_checks_the_decoded_size(tmp_path: Path) -> None:
    """A chunk that decompresses cleanly to the wrong size is named too."""
    import numcodecs

    _, dest, _ = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    import json

    from asyncshard.convert.layout import read_layout
    from asyncshard.formats.zarr3.shard import encode_shard

    layout = read_layout(json.loads((dest / "zarr.json").read_text()))
    assert layout.index is not None
    chunks = {
        (0, 0): numcodecs.Zstd().encode(bytes(100)),
        (0, 1): numcodecs.Zstd().encode(bytes(128)),
    }
    _first_shard(dest).write_bytes(encode_shard(chunks, layout.index))
    report = await verify_async(dest, decode=True)
    [damaged] = report.damaged
    assert damaged.lost == {"c/0/0": "decodes to 100 bytes, not 128"}


async def test_an_unknown_codec_is_refused_before_reading(tmp_path: Path) -> None:
    import numcodecs

    _, dest, _ = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    doc = (dest / "zarr.json").read_text().replace('"zstd"', '"lz4"')
    (dest / "zarr.json").write_text(doc)
    with pytest.raises(InvalidMetadataError, match="cannot check the 'lz4' codec"):
        await verify_async(dest, decode=True)
    assert (await verify_async(dest)).ok  # without --decode, the structure is checked


async def test_repair_from_the_v2_original_restores_lost_chunks(tmp_path: Path) -> None:
    import numcodecs
    import zarr

    source, dest, data = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    before = _shard_chunks(dest)
    path = _first_shard(dest)
    path.write_bytes(path.read_bytes()[:-30])  # truncated: the index is gone
    dry = await repair_async(dest, source=source, dry_run=True)
    assert sorted(dry.damaged[0].restored) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert dry.damaged[0].lost == {}

    fixed = await repair_async(dest, source=source)
    [damaged] = fixed.damaged
    assert len(damaged.restored) == 4 and damaged.lost == {}
    assert damaged.action == "rewritten with 0 intact chunks and 4 restored from the source"
    assert (await verify_async(dest, decode=True)).ok
    assert _shard_chunks(dest) == before  # byte for byte
    np.testing.assert_array_equal(zarr.open_array(str(dest), mode="r")[...], data)


async def test_repair_from_a_source_that_stores_chunks_otherwise_is_refused(
    tmp_path: Path,
) -> None:
    import numcodecs

    _, dest, data = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    other = tmp_path / "other"
    _v2(other, data, (8, 8), compressors=numcodecs.GZip())
    _damage_a_chunk(dest)
    before = _first_shard(dest).read_bytes()
    with pytest.raises(InvalidMetadataError, match="stores its chunks differently"):
        await repair_async(dest, source=other)
    assert _first_shard(dest).read_bytes() == before


async def test_precomputed_repair_from_the_unsharded_original(tmp_path: Path) -> None:
    """A volume sharded from a flat copy; a shard truncated; the flat copy restores it."""
    sharded = tmp_path / "sharded"
    write_precomputed(sharded)
    expected = await precomputed_chunks(sharded)
    flat = tmp_path / "flat"
    shutil.copytree(sharded, flat)
    await unshard_precomputed_async(flat)
    damaged_shard = max((sharded / "1_1_1").glob("*.shard"), key=lambda p: p.stat().st_size)
    damaged_shard.write_bytes(damaged_shard.read_bytes()[:100])

    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["repair", str(sharded), "--from", str(flat), "-q", "--decode"],
    )
    assert result.exit_code == 0, result.output  # every damaged chunk was restored
    assert "restored" in result.output and "  lost " not in result.output
    assert (await verify_async(sharded, decode=True)).ok
    assert await precomputed_chunks(sharded) == expected
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(sharded)},
    }
    values = ts.open(spec).result().read().result()
    assert int(np.asarray(values).astype(np.int64).sum()) == int(
        (np.arange(32**3, dtype=np.uint32) % 251).astype(np.int64).sum()
    )


def test_from_flags_need_from(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["repair", str(tmp_path), "--from-option", "a=b"])
    assert result.exit_code == 2 and "need --from SOURCE" in result.output


def test_decode_refuses_data_types_of_unknown_size() -> None:
    from asyncshard.formats.zarr3.codecs import decoded_size

    assert decoded_size("complex64", (4, 4)) == 128
    for name in ("float8_e4m3fn", "int4", "string", None):
        with pytest.raises(InvalidMetadataError, match="--decode checks"):
            decoded_size(name, (4, 4))


def test_a_decompression_bomb_is_refused_before_decoding() -> None:
    import numcodecs

    from asyncshard.errors import CorruptShardError
    from asyncshard.formats.zarr3.codecs import chunk_check

    codecs = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}]
    check = chunk_check(codecs, 1024)
    check(numcodecs.Zstd().encode(bytes(1024)))
    with pytest.raises(CorruptShardError, match="declares 1073741824 bytes"):
        check(numcodecs.Zstd().encode(bytes(2**30)))
    blosc = chunk_check([{"name": "bytes"}, {"name": "blosc"}], 1024)
    with pytest.raises(CorruptShardError, match="declares"):
        blosc(numcodecs.Blosc().encode(bytes(2**20)))


async def test_restored_is_reported_only_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numcodecs

    import asyncshard.integrity.scan as scan
    from asyncshard.errors import ConflictError

    source, dest, _ = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    path = _first_shard(dest)
    path.write_bytes(path.read_bytes()[:-30])

    async def conflict(*args: Any, **kwargs: Any) -> Any:
        raise ConflictError("another writer")

    monkeypatch.setattr(scan, "replace_shard", conflict)
    report = await repair_async(dest, source=source)
    [damaged] = report.damaged
    assert damaged.action is not None and damaged.action.startswith("left alone")
    assert damaged.restored == []
