"""The asyncshard server as a conformance backend: obstore's HTTP store pointed at it.

One server (session-wide, in a thread) serves a temporary folder through a LocalStore;
each test gets a fresh sub-folder, seeded by writing files behind the server's back, and
reads it through ``open_store("http://127.0.0.1:PORT/<folder>/")``. This runs the read
side of the suite (ranges, 416 handling, HEAD, versions and ``If-Match``) end to end over
the server's HTTP; the write and listing tests skip (plain HTTP stores are read-only and
do not list).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from asyncshard.backends import LocalStore, open_store
from asyncshard.server.app import make_app
from asyncshard.testing import Harness
from tests.servers._threaded import ThreadedApp
from tests.servers.fixtures import SHARED, unique_prefix, write_files


class ServedFolder:
    """``make_app`` over a LocalStore of a temporary folder, on a free port."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="asyncshard-served-"))
        self._app = ThreadedApp(self._factory, "asyncshard-server")

    async def _factory(self) -> web.Application:
        return make_app(LocalStore(self.root))

    @property
    def url(self) -> str:
        return self._app.url

    def start(self) -> ServedFolder:
        self._app.start()
        return self

    def stop(self) -> None:
        self._app.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def asyncshard_server() -> Iterator[ServedFolder]:
    """The asyncshard server over a temporary folder (session-wide)."""
    with SHARED.use("asyncshard-server", lambda: ServedFolder().start(), ServedFolder.stop) as s:
        yield s


@pytest.fixture
async def served_store(asyncshard_server: ServedFolder) -> AsyncIterator[Harness]:
    """obstore's HTTP store reading a fresh folder through the asyncshard server."""
    prefix = unique_prefix()
    folder = asyncshard_server.root / prefix
    folder.mkdir()
    async with open_store(f"{asyncshard_server.url}/{prefix}/") as store:
        yield Harness(store, seeder=write_files(folder))
