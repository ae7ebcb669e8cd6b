"""Concurrent partial writers of one shard lose nothing on a backend with conditional writes."""

from __future__ import annotations

import asyncio
import json

from asyncshard.backends import open_store
from asyncshard.cache import LoadingCache
from asyncshard.sharding.zarr import ZarrShardedStore
from tests.servers.fixtures import unique_prefix
from tests.servers.s3 import S3Server
from tests.zarr.helpers import array_doc

TASKS, UPDATES, SIDE = 8, 50, 20  # one shard of 20x20 inner chunks, 400 updates


async def test_400_partial_updates_on_s3_all_land(s3_server: S3Server) -> None:
    inner = open_store(f"s3://{s3_server.bucket}/{unique_prefix()}", **s3_server.options())
    doc = array_doc([SIDE * 2, SIDE * 2], [SIDE * 2, SIDE * 2], [2, 2])
    await inner.set("arr/zarr.json", json.dumps(doc).encode())
    writers = [
        await ZarrShardedStore.open(inner, "arr", cache=LoadingCache()) for _ in range(TASKS)
    ]

    async def writer(task: int) -> None:
        for n in range(UPDATES):
            i, j = divmod(task * UPDATES + n, SIDE)
            await writers[task].set(f"arr/c/{i}/{j}", f"{task}:{n}".encode())

    await asyncio.gather(*(writer(t) for t in range(TASKS)))
    assert inner.stats.requests["put"] > TASKS * UPDATES  # conflicts happened and were retried
    reader = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
    keys = [f"arr/c/{i}/{j}" for i in range(SIDE) for j in range(SIDE)]
    values = await reader.get_partial_values([(k, None) for k in keys])
    expected = [f"{t}:{n}".encode() for t in range(TASKS) for n in range(UPDATES)]
    assert [bytes(v or b"") for v in values] == expected
    assert [k async for k in inner.list_prefix("arr/c/")] == ["arr/c/0/0"]
    await inner.close()
