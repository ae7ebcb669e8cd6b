"""Readers and writers in separate processes sharing sharded arrays on local files.

Two writer processes update their own chunks of shards they share; this process reads
every chunk over and over through one long-lived store with a warm cache. Every
acknowledged write must be visible to a read that starts ``recheck_after`` (plus a small
scheduling margin) after the acknowledgement, and no read may fail with a
``ConflictError`` (the reader set no condition).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from pathlib import Path

from asyncshard.backends import LocalStore
from asyncshard.cache import LoadingCache
from asyncshard.sharding import ZarrShardedStore
from tests.zarr.helpers import array_doc

RECHECK = 0.2
MARGIN = 0.15  # scheduling slack between two processes on a busy 2-core machine
CHUNKS = 16  # 1-d array, 4 chunks per shard: both writers share every shard
WRITES = 40
WRITERS = 2


def owned(writer: int) -> list[int]:
    return [c for c in range(CHUNKS) if c % WRITERS == writer]


def writer_main(root: str, writer: int, log: str) -> None:
    """Write each owned chunk ``WRITES`` times; log (chunk, seq, ack time) per write."""

    async def run() -> None:
        store = await ZarrShardedStore.open(LocalStore(root), "arr", cache=LoadingCache())
        with open(log, "w") as out:
            for seq in range(1, WRITES + 1):
                for chunk in owned(writer):
                    await store.set(f"arr/c/{chunk}", f"{chunk}:{seq}".encode())
                    out.write(json.dumps([chunk, seq, time.monotonic()]) + "\n")
                    out.flush()
                await asyncio.sleep(0.005)

    asyncio.run(run())


async def test_readers_see_every_acknowledged_write_within_recheck_after(tmp_path: Path) -> None:
    root = tmp_path / "data"
    inner = LocalStore(root)
    await inner.set("arr/zarr.json", json.dumps(array_doc([CHUNKS], [4], [1])).encode())
    reader = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache(), recheck_after=RECHECK)
    assert await reader.get("arr/c/0") is None  # cache the empty layout first
    ctx = multiprocessing.get_context("spawn")
    logs = [tmp_path / f"writer{w}.jsonl" for w in range(WRITERS)]
    procs = [
        ctx.Process(target=writer_main, args=(str(root), w, str(logs[w]))) for w in range(WRITERS)
    ]
    for proc in procs:
        proc.start()
    reads: list[tuple[int, float, int]] = []  # chunk, read start, seq seen (0: none)
    while any(p.is_alive() for p in procs):
        for chunk in range(CHUNKS):
            started = time.monotonic()
            value = await reader.get(f"arr/c/{chunk}")  # raises nothing, ever
            seen = 0 if value is None else int(bytes(value).split(b":")[1])
            if value is not None:
                assert bytes(value).split(b":")[0] == str(chunk).encode(), "wrong bytes"
            reads.append((chunk, started, seen))
        await asyncio.sleep(0.01)
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    acks: dict[int, list[tuple[float, int]]] = {c: [] for c in range(CHUNKS)}
    for log in logs:
        for line in log.read_text().splitlines():
            chunk, seq, at = json.loads(line)
            acks[chunk].append((at, seq))
    assert sum(map(len, acks.values())) == CHUNKS * WRITES
    late = 0
    for chunk, started, seen in reads:
        due = [seq for at, seq in acks[chunk] if at < started - RECHECK - MARGIN]
        if due and seen < max(due):
            late += 1
    assert late == 0, f"{late} of {len(reads)} reads missed a write acknowledged long before"
    assert len(reads) > 10 * CHUNKS, "the reader raced the writers for a while"
    for chunk in range(CHUNKS):  # and at the end, everything
        assert await reader.get(f"arr/c/{chunk}") == f"{chunk}:{WRITES}".encode()
