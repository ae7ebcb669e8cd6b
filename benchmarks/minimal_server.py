#!/usr/bin/env python
"""The reference servers of ``bench_serve.py``: the least an aiohttp handler can do.

* ``flat ROOT``: open the chunk file, read it whole, close it, answer 200 (no ETag, no
  range or conditional handling, no path confinement beyond refusing ``..``).
* ``shards ROOT ARRAY``: every shard file of the Zarr v3 array ``ARRAY`` is opened and
  its index read at start-up (uncompressed 3-d inner chunks, index at the end with a
  crc32c); a request is one ``os.pread`` of the inner chunk from the open file.

Both print ``serving at http://127.0.0.1:PORT/ ...`` like ``asyncshard serve`` and run
until SIGTERM. Only for measuring: these handlers are what the asyncshard server is
compared with, not something to serve data with.

    python benchmarks/minimal_server.py flat ROOT
    python benchmarks/minimal_server.py shards ROOT ARRAY
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from asyncshard import loops

ChunkTable = dict[str, tuple[int, int, int]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def flat_handler(root: Path) -> Handler:
    base = str(root)

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        if ".." in path:
            return web.Response(status=400)
        try:
            fd = os.open(f"{base}/{path}", os.O_RDONLY)
        except FileNotFoundError:
            return web.Response(status=404)
        try:
            size = os.fstat(fd).st_size
            body = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        return web.Response(body=body, content_type="application/octet-stream")

    return handle


def shard_table(root: Path, array: str) -> ChunkTable:
    """Inner chunk key -> (open shard descriptor, offset, length), from every shard."""
    doc = json.loads((root / array / "zarr.json").read_text())
    shard_shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
    config = doc["codecs"][0]["configuration"]
    inner = config["chunk_shape"]
    per = [s // c for s, c in zip(shard_shape, inner, strict=True)]
    n = int(np.prod(per))
    table: ChunkTable = {}
    for path in (root / array / "c").rglob("*"):
        if not path.is_file():
            continue
        shard = [int(p) for p in path.relative_to(root / array / "c").parts]
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        raw = os.pread(fd, 16 * n + 4, size - 16 * n - 4)
        index = np.frombuffer(raw[:-4], "<u8").reshape(*per, 2)
        for local in np.ndindex(*per):
            offset, length = (int(v) for v in index[local])
            if offset == 2**64 - 1:
                continue
            coords = [s * p + c for s, p, c in zip(shard, per, local, strict=True)]
            table[f"{array}/c/" + "/".join(map(str, coords))] = (fd, offset, length)
    return table


def shard_handler(table: ChunkTable) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        found = table.get(request.match_info["path"])
        if found is None:
            return web.Response(status=404)
        fd, offset, length = found
        body = os.pread(fd, length, offset)
        return web.Response(body=body, content_type="application/octet-stream")

    return handle


def main() -> None:
    mode, root = sys.argv[1], Path(sys.argv[2])
    handler = (
        flat_handler(root) if mode == "flat" else shard_handler(shard_table(root, sys.argv[3]))
    )
    app = web.Application()
    app.router.add_get("/{path:.*}", handler)

    def announce(runner: web.AppRunner) -> None:
        print(f"serving at http://127.0.0.1:{runner.addresses[0][1]}/ ({mode})", flush=True)

    async def start() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        announce(runner)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    loops.run(start())  # the loop ASYNCSHARD_EVENT_LOOP names, as for asyncshard serve


if __name__ == "__main__":
    main()
