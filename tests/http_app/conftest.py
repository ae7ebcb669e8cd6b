"""Fixtures for the server tests: an app over a seeded folder, served in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from asyncshard.backends import LocalStore
from asyncshard.server.app import LoggedRequest, make_app
from asyncshard.server.config import AppConfig
from asyncshard.server.runner import serving
from asyncshard.store import Store

DATA = bytes(range(256)) * 40  # 10240 bytes, every byte value
FILES: dict[str, bytes] = {
    "obj": DATA,
    "empty": b"",
    "meta.json": b'{"zarr_format": 3}',
    "d/a": b"a",
    "d/b.bin": b"bb",
    "d/sub/c": b"c",
    "d/sp ace/naïve key#1?.bin": b"u",
}


@contextlib.asynccontextmanager
async def running(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (port chosen by the OS) in this loop, as ``asyncshard
    serve`` does; yield its URL."""
    async with serving(app, "127.0.0.1", 0) as port:
        yield f"http://127.0.0.1:{port}"


def seed(root: Path, files: Mapping[str, bytes]) -> None:
    for key, value in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)


@dataclass
class Served:
    """A running server: its URL, the folder it serves and the requests it answered."""

    url: str
    root: Path
    store: Store
    log: deque[LoggedRequest] = field(default_factory=deque)


ServeFactory = Callable[..., contextlib.AbstractAsyncContextManager[Served]]


@pytest.fixture
def serve(tmp_path: Path) -> ServeFactory:
    """``async with serve(**make_app_options) as served``: the app over a seeded folder."""

    @contextlib.asynccontextmanager
    async def start(
        store: Store | None = None, *, close_store: bool = True, **options: Any
    ) -> AsyncIterator[Served]:
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        seed(root, FILES)
        store = store if store is not None else LocalStore(root)
        log: deque[LoggedRequest] = deque()
        async with running(
            make_app(store, AppConfig(**options), request_log=log, close_store=close_store)
        ) as url:
            yield Served(url, root, store, log)

    return start


@pytest.fixture
async def served(serve: ServeFactory) -> AsyncIterator[Served]:
    """The default (read-only, CORS ``*``) server over :data:`FILES`."""
    async with serve() as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain client: no transparent decompression, no URL normalisation surprises."""
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


async def raw_request(
    url: str, method: str, target: str, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send a request line with ``target`` exactly as given (no client normalisation)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), parsed, body


@pytest.fixture(scope="session")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``serve --demo`` volume (sharded zarr3 and precomputed), written once."""
    from asyncshard.server.demo import write_demo

    folder = tmp_path_factory.mktemp("demo")
    asyncio.run(write_demo(folder))
    return folder
