"""``shard --to`` takes the storage flags as ``cp`` does: they apply to each cloud URL of
the two, so ``--endpoint`` alone reaches the same server for SRC and DEST (before, DEST
went to AWS, and a local SRC with ``--endpoint`` was a usage error)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from click.testing import CliRunner

from asyncshard.backends import open_store
from asyncshard.cli import cli
from asyncshard.convert.report import describe_change
from tests.convert.helpers import make_array, snapshot
from tests.servers.s3 import S3Server


def _flags(server: S3Server) -> list[str]:
    args = ["--endpoint", server.endpoint]
    for pair in (
        f"access_key_id={server.access_key}",
        f"secret_access_key={server.secret_key}",
        f"region={server.region}",
    ):
        args += ["-o", pair]
    return args


def _keys(server: S3Server, url: str) -> list[str]:
    async def listed() -> list[str]:
        async with open_store(url, **server.options()) as store:
            return [key async for key in store.list()]

    return asyncio.run(listed())


def test_endpoint_applies_to_a_cloud_dest_of_a_local_source(
    s3_server: S3Server, tmp_path: Path
) -> None:
    make_array(tmp_path / "x" / "arr", (8, 8), (2, 2), compressors=None)
    dest = f"s3://{s3_server.bucket}/t-{uuid.uuid4().hex[:12]}/x"
    args = ["shard", str(tmp_path / "x"), "2", "--to", dest, "-q", *_flags(s3_server)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "arr/zarr.json" in _keys(s3_server, dest)


def test_endpoint_applies_to_both_cloud_urls(s3_server: S3Server, tmp_path: Path) -> None:
    make_array(tmp_path / "x" / "arr", (8, 8), (2, 2), compressors=None)
    prefix = f"s3://{s3_server.bucket}/t-{uuid.uuid4().hex[:12]}"

    async def upload() -> None:
        async with open_store(prefix, **s3_server.options()) as store:
            await store.set_many(list(snapshot(tmp_path, skip=()).items()))

    asyncio.run(upload())
    args = ["shard", f"{prefix}/x", "2", "--to", f"{prefix}/y", "--json", *_flags(s3_server)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "arr/zarr.json" in _keys(s3_server, f"{prefix}/y")


def test_a_one_chunk_shard_reads_in_the_singular() -> None:
    assert describe_change("flat (0)", "sharded 1 (c/0)") == (
        "flat → sharded (1 chunk per shard), chunk keys 0 → c/0"
    )
