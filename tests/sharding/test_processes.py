"""Readers and writers in separate processes sharing sharded arrays (local files, S3).

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
import random
import struct
import time
from pathlib import Path

from asyncshard import open_sharded
from asyncshard.backends import LocalStore
from asyncshard.cache import LoadingCache
from asyncshard.sharding import ZarrShardedStore
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.s3 import S3Server
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


# -- read-your-writes across processes on S3 ------------------------------------------

RYW_ROUNDS = 3
RYW_OPS = 120
RYW_N = 32  # uint16 values per chunk; 4 chunks, one shard


def ryw_value(seq: int, count: int = RYW_N) -> bytes:
    return struct.pack(f"<{count}H", *([seq] * count))


def ryw_main(url: str, options: dict[str, str], w: int, result: str) -> None:
    """Write, patch and erase chunk ``w`` one operation at a time, reading it back after
    each while a second task reads the whole shard; log every mismatch."""

    async def run() -> list[str]:
        store = await open_sharded(url, "arr", storage_options=options)
        key, rng, model, bad = f"arr/c/{w}", random.Random(w), None, []
        stop = asyncio.Event()

        async def neighbour() -> None:  # whole-shard reads racing this process's writes
            while not stop.is_set():
                await store.get_partial_values([(f"arr/c/{c}", None) for c in range(4)])
                store.forget_cached()
                await asyncio.sleep(0)

        background = asyncio.ensure_future(neighbour())
        for seq in range(1, RYW_OPS + 1):
            r = rng.random()
            if r < 0.45:
                model = ryw_value(seq)
                await store.set(key, model)
            elif r < 0.75:
                start = 2 * rng.randrange(RYW_N)
                patch = ryw_value(seq, rng.randrange(1, RYW_N - start // 2 + 1))
                await store.set_partial_values([(key, start, patch)])
                base = bytearray(model or b"").ljust(start, b"\0")
                base[start : start + len(patch)] = patch
                model = bytes(base)
            else:
                await store.erase_values([key])
                model = None
            got = await store.get(key)
            if (None if got is None else bytes(got)) != model:
                bad.append(f"op {seq}: read {got and bytes(got)[:4].hex()}")
        stop.set()
        await background
        await store.close()
        return bad

    Path(result).write_text(json.dumps(asyncio.run(run())))


async def test_each_process_reads_its_own_last_acknowledged_write_on_s3(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """4 processes, each with its own chunk of one shard on S3: after every write,
    patch or erase, the process reads back exactly what it was told is stored."""
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(RYW_ROUNDS):
        prefix = unique_prefix()
        async with s3_store_on(s3_server, prefix) as direct:
            doc = array_doc([4 * RYW_N], [4 * RYW_N], [RYW_N], dtype="uint16")
            await direct.set("arr/zarr.json", json.dumps(doc).encode())
        url = f"s3://{s3_server.bucket}/{prefix}"
        results = [tmp_path / f"r{round_}-{w}.json" for w in range(4)]
        procs = [
            ctx.Process(target=ryw_main, args=(url, s3_server.options(), w, str(results[w])))
            for w in range(4)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(300)
            assert proc.exitcode == 0
        bad = {w: json.loads(r.read_text()) for w, r in enumerate(results)}
        assert not any(bad.values()), f"round {round_}: older reads {bad}"
