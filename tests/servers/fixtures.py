"""pytest fixtures for the real test servers and stores on them.

Servers are session-scoped and shared process-wide: a conftest imports the fixtures it
needs, and however many conftests do, each server starts once (on 127.0.0.1, a free
port) and stops when the last session fixture using it is finalised.

Store fixtures (``s3_store``, ``rclone_store``, ``gcs_store``, ``http_store``) yield a
conformance :class:`Harness` around a fresh store on a fresh random prefix.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from asyncshard.backends import open_store
from asyncshard.store import Store
from asyncshard.testing import Harness
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.http_static import StaticServer
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server, external_s3, start_rclone
from tests.servers.seaweedfs import start_seaweedfs
from tests.servers.webdav import WebDAVServer, start_webdav

T = TypeVar("T")

#: Named deviations of ``rclone serve s3`` 1.75, reported in skips (see docs/cloud.md).
RCLONE_QUIRKS = {
    "rclone-ranged-get-200": (
        "obstore rejects a 200 to a ranged GET; a proxy in the test setup rewrites it to 206"
    ),
    "rclone-ignores-conditional-headers": (
        "If-Match/If-None-Match ignored: the store is opened with conditional_writes=False; "
        "reads stay safe because CloudStore checks the ETag of every conditional read's answer"
    ),
    "rclone-long-suffix-416": (
        "bytes=-N with N > size answered 416: CloudStore re-reads after a HEAD (2 extra requests)"
    ),
}
TEST_BUCKET = "asyncshard-test"


class _Shared:
    """Process-wide servers with reference counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}
        self._refs: dict[str, int] = {}
        self._stops: dict[str, Callable[[], None]] = {}

    @contextmanager
    def use(self, name: str, start: Callable[[], T], stop: Callable[[T], None]) -> Iterator[T]:
        with self._lock:
            if name not in self._items:
                item = start()
                self._items[name] = item
                self._stops[name] = lambda: stop(item)
            self._refs[name] = self._refs.get(name, 0) + 1
            item = self._items[name]
        try:
            yield item
        finally:
            with self._lock:
                self._refs[name] -= 1
                if self._refs[name] == 0:
                    self._stops.pop(name)()
                    del self._items[name]


SHARED = _Shared()


@contextmanager
def local_dask_client(workers: int, *, default: bool = True) -> Iterator[Any]:
    """A ``dask.distributed`` client of a local cluster of ``workers`` processes, one
    thread each; its dashboard on a free port (``None`` still takes 8787 and warns when
    another cluster of the session holds it). ``default``: it becomes dask's scheduler
    while it lives; a client kept for the whole session must not (every later
    ``dask.compute`` of the worker process would run on processes started before that
    test set its environment, such as the credentials of the S3 test server)."""
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster, set_as_default=default) as client,
    ):
        yield client


def unique_prefix() -> str:
    """A fresh prefix so that every test starts from an empty store."""
    return f"t-{uuid.uuid4().hex[:12]}"


# -- servers (session) -------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The suite's S3 server: SeaweedFS, a real S3 implementation, or the external endpoint
    named by ``ASYNCSHARD_TEST_S3_ENDPOINT`` (MinIO, AWS, ...)."""
    with SHARED.use("s3", lambda: external_s3() or start_seaweedfs(), S3Server.stop) as server:
        yield server


@pytest.fixture(scope="session")
def rclone_server() -> Iterator[S3Server]:
    """``rclone serve s3`` over a temporary folder (talk to it directly: quirks apply)."""
    with SHARED.use("rclone", start_rclone, S3Server.stop) as server:
        yield server


@pytest.fixture(scope="session")
def rclone_fixed(rclone_server: S3Server) -> Iterator[FaultProxy]:
    """A proxy in front of rclone that rewrites its ranged ``200`` answers to ``206``."""

    def start() -> FaultProxy:
        return FaultProxy(rclone_server.endpoint, fix_ranged_200=True).start()

    with SHARED.use("rclone-fixed", start, FaultProxy.stop) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def gcs_fake() -> Iterator[FakeGCS]:
    """The aiohttp FAKE of the GCS XML API (see tests/servers/gcs_fake.py)."""

    def start() -> FakeGCS:
        fake = FakeGCS()
        fake.create_bucket(TEST_BUCKET)
        return fake.start()

    with SHARED.use("gcs", start, FakeGCS.stop) as fake:
        yield fake


@pytest.fixture(scope="session")
def http_server() -> Iterator[StaticServer]:
    """A static file server over a temporary folder."""

    def start() -> StaticServer:
        return StaticServer(Path(tempfile.mkdtemp(prefix="asyncshard-http-"))).start()

    def stop(server: StaticServer) -> None:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)

    with SHARED.use("http", start, stop) as server:
        yield server


@pytest.fixture(scope="session")
def webdav_server() -> Iterator[WebDAVServer]:
    """``rclone serve webdav`` (read-only) over a temporary folder."""
    with SHARED.use("webdav", start_webdav, WebDAVServer.stop) as server:
        yield server


# -- store factories ---------------------------------------------------------------------


def s3_store_on(server: S3Server, prefix: str, endpoint: str | None = None, **opts: Any) -> Store:
    """A store on ``server`` (or reached through ``endpoint``, e.g. a proxy)."""
    options = server.options(**opts)
    if endpoint is not None:
        options["endpoint"] = endpoint
    return open_store(f"s3://{server.bucket}/{prefix}", **options)


def gcs_store_on(fake: FakeGCS, prefix: str, **opts: Any) -> Store:
    return open_store(
        f"gs://{TEST_BUCKET}/{prefix}", service_account_key=service_account_key(fake.url), **opts
    )


def write_files(root: Path) -> Callable[[Mapping[str, bytes]], Any]:
    """A seeder that writes objects as files below ``root`` (behind an HTTP store's back)."""

    async def seed(objects: Mapping[str, bytes]) -> None:
        for key, value in objects.items():
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(value)

    return seed


# -- conformance harnesses (function) ----------------------------------------------------


@pytest.fixture
async def s3_store(s3_server: S3Server) -> AsyncIterator[Harness]:
    """S3 on moto (or the external endpoint), full semantics."""
    async with s3_store_on(s3_server, unique_prefix()) as store:
        yield Harness(store)
        if s3_server.external:
            await store.erase_prefix("")


@pytest.fixture
async def rclone_store(rclone_server: S3Server, rclone_fixed: FaultProxy) -> AsyncIterator[Harness]:
    """S3 on ``rclone serve s3``: its two quirks handled explicitly, see the constants."""
    store = s3_store_on(
        rclone_server, unique_prefix(), endpoint=rclone_fixed.url, conditional_writes=False
    )
    async with store:
        yield Harness(store, quirks=RCLONE_QUIRKS)


@pytest.fixture
async def gcs_store(gcs_fake: FakeGCS) -> AsyncIterator[Harness]:
    """GCS through obstore's GCS client, against the aiohttp GCS fake."""
    async with gcs_store_on(gcs_fake, unique_prefix()) as store:
        yield Harness(store)


@pytest.fixture
async def http_store(http_server: StaticServer) -> AsyncIterator[Harness]:
    """Read-only HTTP over a static server; objects are seeded as files."""
    prefix = unique_prefix()
    folder = http_server.root / prefix
    folder.mkdir()
    async with open_store(f"{http_server.url}/{prefix}/") as store:
        yield Harness(store, seeder=write_files(folder))


@pytest.fixture
async def webdav_store(webdav_server: WebDAVServer) -> AsyncIterator[Harness]:
    """Read-only HTTP with listing through WebDAV PROPFIND (``listing=True``)."""
    prefix = unique_prefix()
    folder = webdav_server.root / prefix
    folder.mkdir()
    async with open_store(f"{webdav_server.url}/{prefix}", listing=True) as store:
        yield Harness(store, seeder=write_files(folder))
