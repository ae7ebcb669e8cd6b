"""``verify`` and ``repair`` on the S3 server: conditional rewrites over ETags, and a
shard with nothing intact emptied conditionally (S3 has no conditional delete)."""

from __future__ import annotations

from pathlib import Path

from asyncshard.integrity import repair_async, verify_async
from asyncshard.sharding.zarr import ZarrShardedStore
from tests.integrity.test_verify_repair import (
    SHARD_KEY,
    out_of_range,
    truncate,
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
