"""``verify`` and ``repair`` on the S3 server: conditional rewrites over ETags, and a
shard with nothing intact emptied conditionally (S3 has no conditional delete)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from asyncshard.cli import cli
from asyncshard.integrity import repair_async, verify_async
from asyncshard.sharding.zarr import ZarrShardedStore
from tests.integrity.test_verify_repair import (
    SHARD_KEY,
    corrupt_chunk,
    out_of_range,
    truncate,
    write_precomputed,
    write_zarr,
    zarr_chunks,
)
from tests.servers import fixtures as server_fixtures
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.s3 import S3Server

s3_server = server_fixtures.s3_server

EMPTIED = "arr/c/0/1"


async def test_verify_and_repair_on_s3(tmp_path: Path, s3_server: S3Server) -> None:
    write_zarr(tmp_path)
    before = await zarr_chunks(tmp_path)
    out_of_range(tmp_path / SHARD_KEY)
    truncate(tmp_path / EMPTIED)
    async with s3_store_on(s3_server, unique_prefix()) as store:
        for path in sorted(tmp_path.rglob("*")):
            if path.is_file():
                await store.set(str(path.relative_to(tmp_path)), path.read_bytes())
        report = await verify_async(store)
        assert [d.key for d in report.damaged] == [EMPTIED, SHARD_KEY] and report.shards == 4
        fixed = await repair_async(store)
        actions = {d.key: d.action for d in fixed.damaged}
        assert actions == {
            EMPTIED: "emptied: no chunk was intact",
            SHARD_KEY: "rewritten with 15 intact chunks",
        }
        assert (await verify_async(store)).ok
        array = await ZarrShardedStore.open(store, "arr")
        keys = list(before)
        after = await array.get_partial_values([(k, None) for k in keys])
        lost = [k for k, v in zip(keys, after, strict=True) if v is None]
        assert len(lost) == 17 and "arr/c/5/1" in lost  # 16 of the emptied shard and one
        kept = [(k, v) for k, v in zip(keys, after, strict=True) if v is not None]
        assert all(bytes(v) == before[k] for k, v in kept), "intact chunks byte-identical"


async def test_every_dataset_checked_and_no_corrupt_restore_on_s3(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """A volume at the root and an array below it, on S3: the array's corrupt chunk is
    found, and ``repair --from`` the store itself does not put it back."""
    write_precomputed(tmp_path)
    write_zarr(tmp_path / "z")
    corrupt_chunk(tmp_path / "z" / SHARD_KEY)
    prefix = unique_prefix()
    async with s3_store_on(s3_server, prefix) as store:
        for path in sorted(tmp_path.rglob("*")):
            if path.is_file():
                await store.set(str(path.relative_to(tmp_path)), path.read_bytes())
    url = f"s3://{s3_server.bucket}/{prefix}"
    flags = ["--endpoint", s3_server.endpoint, "-q"]
    source_flags = ["--from", url, "--from-endpoint", s3_server.endpoint]
    for key, value in s3_server.options().items():
        if key != "endpoint":
            flags += ["-o", f"{key}={value}"]
            source_flags += ["--from-option", f"{key}={value}"]

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, [*args, url, *flags])

    found = await asyncio.to_thread(run, "verify", "--json")
    assert found.exit_code == 1, found.output
    report = json.loads(found.output)
    assert report["datasets"] == ["1_1_1", "z/arr"]
    assert [d["key"] for d in report["damaged"]] == [f"z/{SHARD_KEY}"]
    fixed = await asyncio.to_thread(run, "repair", *source_flags)
    assert fixed.exit_code == 1, fixed.output
    assert "not restored z/arr/c/5/1: corrupt in SOURCE: chunk crc32c mismatch" in fixed.output
    assert (await asyncio.to_thread(run, "verify")).exit_code == 0
