"""A fault-injection soak: mixed chunk reads and writes through a sharded store on SeaweedFS
S3 behind the fault proxy (10 % of requests answer 500/503, reset, or cut their body).

Several writers (each its own store and cache, as separate clients would be) update
their own chunks of shared shards while reading everybody's. Checked: 0 wrong bytes;
0 acknowledged writes lost (each chunk ends at its owner's last acknowledged value, or
at a later write whose call failed, since a failed call may have landed before it
raised); 0 acknowledged writes undone later (an owner never reads back a value older
than its last acknowledged one). Every failure is a typed error; their share is
reported.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from asyncshard.cache import LoadingCache
from asyncshard.errors import AsyncShardError
from asyncshard.sharding import ZarrShardedStore
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server
from tests.zarr.helpers import array_doc

WRITERS = 4
CHUNKS = 64  # 1-d, 4 chunks per shard: every shard is shared by all writers
OPS_PER_WRITER = 520  # 2,080 operations in all, about half writes
FAULT_RATE = 0.10
SEED = 1234
#: obstore's retries with short backoffs: the same retry logic, less waiting in tests
FAST_RETRIES = {
    "max_retries": 5,
    "backoff": {
        "init_backoff": timedelta(milliseconds=2),
        "max_backoff": timedelta(milliseconds=100),
        "base": 2,
    },
    "retry_timeout": timedelta(seconds=30),
}


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    p = FaultProxy(s3_server.endpoint, seed=SEED, fault_rate=FAULT_RATE).start()
    yield p
    p.stop()


def value(chunk: int, seq: int) -> bytes:
    return f"{chunk}:{seq}:".encode() + bytes([chunk]) * (100 + seq % 50)


def parse(chunk: int, raw: bytes) -> int:
    """The sequence number of a chunk value; fails on wrong bytes."""
    head, seq, _ = raw.split(b":", 2)
    assert head == str(chunk).encode(), f"chunk {chunk} holds another chunk's bytes"
    assert raw == value(chunk, int(seq)), f"chunk {chunk}: corrupt value"
    return int(seq)


@dataclass
class Ledger:
    """What each writer knows of its chunks: acknowledged and failed sequence numbers."""

    acked: dict[int, list[int]] = field(default_factory=dict)
    failed: dict[int, list[int]] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)

    def allowed(self, chunk: int) -> set[int]:
        """Values a read may return: the last ack, or a later write whose call failed."""
        last = max(self.acked.get(chunk, [0]))
        later = {s for s in self.failed.get(chunk, []) if s > last}
        return {last} | later if last else {0} | later


async def writer(proxy_url: str, s3_server: S3Server, prefix: str, w: int, ledger: Ledger) -> None:
    rng = random.Random(SEED + w)
    inner = s3_store_on(s3_server, prefix, endpoint=proxy_url, retry_config=FAST_RETRIES)
    store = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache(), recheck_after=0.2)
    mine = [c for c in range(CHUNKS) if c % WRITERS == w]
    seq = 0
    for _ in range(OPS_PER_WRITER):
        chunk = rng.choice(mine) if rng.random() < 0.5 else rng.randrange(CHUNKS)
        try:
            if chunk in mine and rng.random() < 0.9:
                seq += 1
                try:
                    await store.set(f"arr/c/{chunk}", value(chunk, seq))
                except AsyncShardError:
                    ledger.failed.setdefault(chunk, []).append(seq)
                    raise
                ledger.acked.setdefault(chunk, []).append(seq)
                ledger.outcomes["write ok"] += 1
            else:
                raw = await store.get(f"arr/c/{chunk}")
                seen = 0 if raw is None else parse(chunk, bytes(raw))
                if chunk in mine:  # never older than what this writer was told landed
                    assert seen in ledger.allowed(chunk), (chunk, seen, ledger.acked[chunk])
                ledger.outcomes["read ok"] += 1
        except AsyncShardError as exc:
            ledger.outcomes[type(exc).__name__] += 1
    await store.close()


async def test_soak_through_faults_loses_and_undoes_nothing(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    prefix = unique_prefix()
    async with s3_store_on(s3_server, prefix) as direct:
        await direct.set("arr/zarr.json", json.dumps(array_doc([CHUNKS], [4], [1])).encode())
    ledger = Ledger()
    await asyncio.gather(*(writer(proxy.url, s3_server, prefix, w, ledger) for w in range(WRITERS)))
    total = sum(ledger.outcomes.values())
    failed = total - ledger.outcomes["write ok"] - ledger.outcomes["read ok"]
    print(f"\nsoak: {total} operations, {dict(ledger.outcomes)}, faults {dict(proxy.faults)}")
    print(f"soak: {len(proxy.log)} requests reached the proxy")
    print(f"soak: {failed / total:.1%} of operations failed with a typed error")
    assert total >= 2000
    assert sum(proxy.faults.values()) > 100, "faults were injected"
    async with s3_store_on(s3_server, prefix) as direct:  # no faults: the final state
        final = await ZarrShardedStore.open(direct, "arr", cache=LoadingCache())
        for chunk in range(CHUNKS):
            raw = await final.get(f"arr/c/{chunk}")
            seen = 0 if raw is None else parse(chunk, bytes(raw))
            assert seen in ledger.allowed(chunk), (
                f"chunk {chunk}: {seen}, acknowledged up to {max(ledger.acked.get(chunk, [0]))}"
            )
    assert failed / total < 0.10, "most operations succeed through 10 % faults"
