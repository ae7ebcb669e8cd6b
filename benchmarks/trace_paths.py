"""The asyncshard functions two requests pass through, for docs/ARCHITECTURE.md.

* a warm ``get`` of an inner chunk of a sharded Zarr array (``ZarrShardedStore`` over a
  ``LocalStore``, its shard index cached);
* a warm ``GET`` of an inner chunk through ``asyncshard serve --unshard`` (the demo
  volume, the server in this process as ``serve`` runs it, the index cached, the chunk
  not yet in the data cache);
* the same ``GET`` repeated (its answer remembered).

Every asyncshard function called while the request runs is recorded once, in the order
of its first call (``sys.setprofile`` on the loop's thread and on worker threads).
Prints, per path, the number of functions and of files, then the list.

    python benchmarks/trace_paths.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

import asyncshard
from asyncshard.backends.local import LocalStore
from asyncshard.server import AppConfig, make_app
from asyncshard.server.demo import ZARR_PATH, write_demo
from asyncshard.server.runner import serving
from asyncshard.sharding.zarr import ZarrShardedStore

PACKAGE = str(Path(asyncshard.__file__).parent)


class Tracer:
    """Records the asyncshard functions called while it is on."""

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.startswith(PACKAGE):
            module = code.co_filename[len(PACKAGE) + 1 :].removesuffix(".py")
            self.seen.setdefault(f"{module}:{code.co_qualname}")

    async def trace(self, request: Callable[[], Awaitable[object]]) -> list[str]:
        """The functions ``request()`` passes through."""
        self.seen.clear()
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            await request()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        return list(self.seen)


def report(title: str, functions: list[str]) -> None:
    files = {f.split(":")[0] for f in functions}
    print(f"## {title}: {len(functions)} functions in {len(files)} files")
    for name in functions:
        print(f"  {name}")


async def warm_get(folder: Path, tracer: Tracer) -> list[str]:
    local = LocalStore(folder)
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [64, 64],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [8, 8],
                    "codecs": [{"name": "bytes"}],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_location": "end",
                },
            }
        ],
    }
    await local.set("arr/zarr.json", json.dumps(doc).encode())
    store = await ZarrShardedStore.open(local, "arr")
    chunk = np.arange(64, dtype=np.uint8).tobytes()
    await store.set("arr/c/0/0", chunk)
    await store.set("arr/c/0/1", chunk)
    assert await store.get("arr/c/0/0") == chunk  # the index is cached now
    await asyncio.sleep(0)  # a later tick
    return await tracer.trace(lambda: store.get("arr/c/0/1"))


async def served_gets(folder: Path, tracer: Tracer) -> tuple[list[str], list[str]]:
    """The functions of a first and of a repeated warm ``GET`` of one chunk."""
    from aiohttp import ClientSession

    await write_demo(str(folder))
    app = make_app(LocalStore(folder), AppConfig(unshard=True))
    async with serving(app, "127.0.0.1", 0) as port, ClientSession() as client:
        base = f"http://127.0.0.1:{port}/{ZARR_PATH}"
        async with client.get(f"{base}/c/0/0/0") as r:  # metadata and index cached
            assert r.status == 200, r.status
            await r.read()

        async def request() -> None:
            async with client.get(f"{base}/c/0/0/1") as r:
                assert r.status == 200
                await r.read()

        return await tracer.trace(request), await tracer.trace(request)


async def main() -> None:
    tracer = Tracer()
    with tempfile.TemporaryDirectory() as tmp:
        report("warm get of an inner chunk", await warm_get(Path(tmp) / "get", tracer))
        first, repeated = await served_gets(Path(tmp) / "srv", tracer)
        report("serve --unshard, warm GET of a chunk", first)
        report("serve --unshard, the GET repeated", repeated)


if __name__ == "__main__":
    asyncio.run(main())
