"""What ``verify`` and ``repair`` report can be trusted: a chunk counts as restored only
if it passes verify's checks, a damaged SOURCE is named and does not stop the run, exit
statuses follow fsck, unverifiable chunks are counted, and every dataset under the root
is checked. All through the real command on real stores, damaged by flipping bytes."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncshard.cli import cli
from tests.integrity.test_verify_repair import (
    SHARD_KEY,
    corrupt_chunk,
    corrupt_index,
    write_precomputed,
    write_zarr,
)

OTHER_SHARD = "arr/c/0/1"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "-q"])
    return result.exit_code, result.output


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    code, output = run(*args, "--json")
    return code, json.loads(output)


def store_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A sharded array (``dst``) and a byte-identical backup of it (``src``)."""
    dst, src = tmp_path / "dst", tmp_path / "src"
    write_zarr(dst)
    shutil.copytree(dst, src)
    return dst, src


def test_a_chunk_corrupt_in_the_source_too_is_not_restored(tmp_path: Path) -> None:
    dst, src = store_pair(tmp_path)
    corrupt_chunk(dst / SHARD_KEY)
    corrupt_chunk(src / SHARD_KEY)
    code, report = run_json("repair", str(dst), "--from", str(src))
    assert code == 1, "the chunk is still lost"
    [damaged] = report["damaged"]
    assert damaged["restored"] == [] and report["restored"] == 0
    assert damaged["not_restored"] == {"arr/c/5/1": "corrupt in SOURCE: chunk crc32c mismatch"}
    assert "arr/c/5/1" in damaged["lost"] and not damaged["repaired"]
    assert run("verify", str(dst))[0] == 0, "rewritten without the corrupt chunk"


def test_repair_from_the_store_itself_restores_nothing_corrupt(tmp_path: Path) -> None:
    dst, _ = store_pair(tmp_path)
    corrupt_chunk(dst / SHARD_KEY)
    code, output = run("repair", str(dst), "--from", str(dst))
    assert code == 1, output
    assert "not restored arr/c/5/1: corrupt in SOURCE: chunk crc32c mismatch" in output
    assert "  restored arr/c/5/1" not in output


def test_a_source_shard_with_a_broken_index_is_named_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    dst, src = store_pair(tmp_path)
    corrupt_chunk(dst / SHARD_KEY)
    corrupt_chunk(dst / OTHER_SHARD)
    corrupt_index(src / SHARD_KEY)  # the source's copy of one damaged shard is unreadable
    code, output = run("repair", str(dst), "--from", str(src))
    assert code == 1, output
    assert "Error" not in output.splitlines()[-1], "the run ended with its summary"
    [line] = [ln for ln in output.splitlines() if ln.startswith("  not restored")]
    assert line.startswith("  not restored arr/c/5/1: SOURCE unreadable: ChecksumError")
    assert SHARD_KEY in line, "the SOURCE shard is named"
    assert f"DAMAGED {OTHER_SHARD} (arr): 0 chunks lost, 1 restored" in output
    assert "2 damaged shards: 1 chunk lost, 1 restored, 1 not restored" in output
    assert "1 shard repaired, 1 with damage remaining" in output


def test_exit_statuses_follow_fsck(tmp_path: Path) -> None:
    dst, src = store_pair(tmp_path)
    assert run("verify", str(dst))[0] == 0
    corrupt_chunk(dst / SHARD_KEY)
    assert run("verify", str(dst))[0] == 1
    assert run("repair", str(dst), "--from", str(src), "--dry-run")[0] == 1, "nothing repaired"
    code, output = run("repair", str(dst), "--from", str(src))
    assert code == 0, output
    assert "all damage repaired" in output and "1 shard repaired, 0 with damage" in output
    assert run("verify", str(dst))[0] == 0
    assert run("verify", str(tmp_path / "missing"))[0] == 2
    assert run("verify", str(dst), "-a", "nope")[0] == 2
    assert run("repair", str(dst), "--from", str(tmp_path / "missing"))[0] == 2


def test_chunks_without_a_checksum_are_counted_as_not_verifiable(tmp_path: Path) -> None:
    write_zarr(tmp_path, chunk_crc=False)
    code, output = run("verify", str(tmp_path))
    assert code == 0 and "all intact" not in output, output
    assert "0 checked intact, 64 not verifiable (no checksum codec: raw)" in output
    code, report = run_json("verify", str(tmp_path))
    assert (report["verified"], report["unverified"]) == (0, {"no checksum codec: raw": 64})


def test_a_precomputed_volume_at_the_root_hides_no_zarr_array(tmp_path: Path) -> None:
    write_precomputed(tmp_path)
    write_zarr(tmp_path / "z")
    code, report = run_json("verify", str(tmp_path))
    assert code == 0 and report["datasets"] == ["1_1_1", "z/arr"]
    corrupt_chunk(tmp_path / "z" / SHARD_KEY)
    code, report = run_json("verify", str(tmp_path))
    assert code == 1 and [d["key"] for d in report["damaged"]] == [f"z/{SHARD_KEY}"]
    assert report["chunks"] == 64 + 63


async def test_a_restored_chunk_must_decode_even_without_decode(tmp_path: Path) -> None:
    """No inner crc32c: a SOURCE chunk whose zstd frame is damaged is caught by decoding
    it, which repair does for every chunk it restores."""
    import numcodecs

    from tests.integrity.test_decode_restore import _sharded_from_v2

    source, dest, _ = await _sharded_from_v2(tmp_path, numcodecs.Zstd(level=3))
    chunk = source / "0.0"
    chunk.write_bytes(b"\xff" * 12 + chunk.read_bytes()[12:])
    shard = dest / "c" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:-30])  # the index is gone
    code, report = await asyncio.to_thread(run_json, "repair", str(dest), "--from", str(source))
    assert code == 1
    [damaged] = report["damaged"]
    assert sorted(damaged["restored"]) == ["c/0/1", "c/1/0", "c/1/1"]
    assert list(damaged["not_restored"]) == ["c/0/0"]
    assert damaged["not_restored"]["c/0/0"].startswith("corrupt in SOURCE: zstd")


def test_precomputed_chunks_are_checked_only_when_decoded(tmp_path: Path) -> None:
    write_precomputed(tmp_path)
    code, output = run("verify", str(tmp_path))
    assert code == 0 and "all intact" not in output
    assert "0 checked intact, 64 not verifiable (gzip data encoding not decoded" in output
    code, output = run("verify", str(tmp_path), "--decode")
    assert code == 0 and "64 checked intact\nall intact" in output


def test_a_failed_rewrite_is_reported_and_the_others_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One shard's rewrite fails (the store refuses it): the run goes on, the report
    lists the shard rewritten and the one not, and damage remains."""
    import asyncshard.integrity.scan as scan
    from asyncshard.errors import StoreConnectionError

    dst, src = store_pair(tmp_path)
    corrupt_chunk(dst / SHARD_KEY)
    corrupt_chunk(dst / OTHER_SHARD)
    real = scan.replace_shard

    async def refused(store: Any, key: str, *args: Any) -> Any:
        if key == SHARD_KEY:
            raise StoreConnectionError("connection reset")
        return await real(store, key, *args)

    monkeypatch.setattr(scan, "replace_shard", refused)
    code, report = run_json("repair", str(dst), "--from", str(src))
    assert code == 1
    actions = {d["key"]: (d["action"], d["repaired"]) for d in report["damaged"]}
    assert actions[OTHER_SHARD] == (
        "rewritten with 15 intact chunks and 1 restored from the source",
        True,
    )
    assert actions[SHARD_KEY][0].startswith("not rewritten: StoreConnectionError")
    assert (report["repaired"], report["remaining"]) == (1, 1)
