"""A gzip bomb inside a precomputed shard does not take the --unshard server down.

One chunk of the demo volume is replaced by 128 MiB of zeros, gzipped (about 130 KB).
The chunk's known size (32^3 voxels of uint8: 32 KiB) bounds its decompression, so the
server answers 500 "corrupt" at once, its memory does not grow by the bomb, and other
clients are served meanwhile (decompression runs off the event loop when it may be big).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import shutil
import time
from pathlib import Path

import aiohttp
import psutil

from asyncshard.backends import LocalStore
from asyncshard.formats.precomputed.shard import build_shard, split_shard
from asyncshard.server.demo import PRECOMPUTED_PATH, SCALE_KEY, precomputed_sharding
from asyncshard.sharding import PrecomputedVolume
from tests.http_app.conftest import ServeFactory

BOMB = gzip.compress(bytes(128 << 20), compresslevel=9)


async def plant_bomb(folder: Path) -> tuple[str, str]:
    """Replace one chunk by the bomb; its chunk name and a healthy chunk's name."""
    volume = await PrecomputedVolume.open(LocalStore(folder), PRECOMPUTED_PATH)
    scale = volume.scale(SCALE_KEY)
    spec = precomputed_sharding()
    bomb_name, healthy_name = "0-32_0-32_0-32", "32-64_0-32_0-32"
    chunk_id = scale.chunk_id(bomb_name)
    shard_key = scale.store.shard_key(chunk_id)
    path = folder / shard_key
    shard, _ = spec.shard_and_minishard_of(chunk_id)
    chunks = {i: bytes(v) for i, v in split_shard(path.read_bytes(), spec, shard).items()}
    chunks[chunk_id] = BOMB
    path.write_bytes(build_shard(chunks, dataclasses.replace(spec, data_encoding="raw")))
    return bomb_name, healthy_name


async def test_a_gzip_bomb_is_refused_cheaply_and_blocks_nobody(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "data"
    shutil.copytree(demo_folder, folder)
    bomb, healthy = await plant_bomb(folder)
    base_rss = psutil.Process().memory_info().rss
    async with serve(store=LocalStore(folder), unshard=True) as s:
        base = f"{s.url}/{PRECOMPUTED_PATH}/{SCALE_KEY}"

        async def get(name: str) -> tuple[int, float]:
            started = time.monotonic()
            async with http.get(f"{base}/{name}") as r:
                await r.read()
                return r.status, time.monotonic() - started

        bombs = [asyncio.ensure_future(get(bomb)) for _ in range(8)]
        others = await asyncio.gather(*(get(healthy) for _ in range(20)))
        results = await asyncio.gather(*bombs)
    assert {status for status, _ in results} == {500}, "the corrupt chunk is an error"
    assert {status for status, _ in others} == {200}
    assert max(seconds for _, seconds in others) < 2.0, "other clients were not stalled"
    growth = (psutil.Process().memory_info().rss - base_rss) >> 20
    assert growth < 100, f"RSS grew by {growth} MiB"
