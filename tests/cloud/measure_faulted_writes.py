"""Measure how many conditional writes fail behind the fault proxy (not a test).

Run ``python -m tests.cloud.measure_faulted_writes``. Starts moto, puts the seeded fault
proxy in front of it (10 % of requests fail) and counts, for each fault mix:

* direct conditional writes on a CloudStore: creates (``if_absent``) of fresh keys, then
  updates (``if_match``) of each;
* chunk writes through a ShardedStore (each one a conditional read-merge-write of its
  shard), and whether every chunk that reported success reads back.

docs/cloud.md records the numbers.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from asyncshard.cache import LoadingCache
from asyncshard.sharding.zarr import ShardedStore
from asyncshard.store import Store
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import ALL_FAULT_KINDS, FAULT_KINDS, FaultProxy
from tests.servers.s3 import S3Server, start_moto
from tests.zarr.helpers import array_doc

KEYS, SHARDS, SIDE = 300, 8, 4  # 8 shards of 4x4 chunks: 128 chunk writes


async def direct(store: Store) -> Counter[str]:
    outcome: Counter[str] = Counter()
    versions: dict[str, str | None] = {}

    async def create(i: int) -> None:
        try:
            versions[f"k{i}"] = await store.set(f"k{i}", b"created %d" % i, if_absent=True)
            outcome["create ok"] += 1
        except Exception as exc:
            outcome[f"create {type(exc).__name__}"] += 1

    async def update(key: str, version: str | None) -> None:
        try:
            await store.set(key, b"updated " + key.encode(), if_match=version)
            outcome["update ok"] += 1
        except Exception as exc:
            outcome[f"update {type(exc).__name__}"] += 1

    await asyncio.gather(*(create(i) for i in range(KEYS)))
    await asyncio.gather(*(update(k, v) for k, v in versions.items()))
    return outcome


async def sharded(inner: Store) -> Counter[str]:
    outcome: Counter[str] = Counter()
    doc = array_doc([SHARDS * SIDE, SIDE], [SIDE, SIDE], [1, 1])
    await inner.set("arr/zarr.json", json.dumps(doc).encode())
    store = await ShardedStore.open(inner, "arr", cache=LoadingCache())
    written: dict[str, bytes] = {}

    async def write(key: str) -> None:
        try:
            await store.set(key, key.encode())
            written[key] = key.encode()
            outcome["chunk ok"] += 1
        except Exception as exc:
            outcome[f"chunk {type(exc).__name__}"] += 1

    keys = [f"arr/c/{i}/{j}" for i in range(SHARDS * SIDE) for j in range(SIDE)]
    for n in range(SIDE):  # a few writers per shard at a time
        await asyncio.gather(*(write(k) for k in keys[n::SIDE]))
    reader = await ShardedStore.open(inner, "arr", cache=LoadingCache())
    got = await reader.get_partial_values([(k, None) for k in written])
    outcome["chunk lost after success"] = sum(
        bytes(v or b"") != written[k] for k, v in zip(written, got, strict=True)
    )
    return outcome


async def measure(server: S3Server, kinds: tuple[str, ...]) -> None:
    proxy = FaultProxy(server.endpoint, fault_rate=0.1, seed=7, kinds=kinds).start()
    try:
        store = s3_store_on(server, unique_prefix(), endpoint=proxy.url)
        result = await direct(store)
        result.update(await sharded(s3_store_on(server, unique_prefix(), endpoint=proxy.url)))
        print(f"kinds={','.join(kinds)}: {dict(sorted(result.items()))}")
        print(f"  proxy faults: {dict(proxy.faults)}")
    finally:
        proxy.stop()


async def main() -> None:
    server = start_moto()
    try:
        await measure(server, FAULT_KINDS)
        await measure(server, ALL_FAULT_KINDS)
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
