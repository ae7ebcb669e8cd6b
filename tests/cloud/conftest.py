"""Fixtures for the cloud-backend tests: real servers from tests/servers, plus helpers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from asyncshard.backends import open_store
from asyncshard.store import Store
from tests.servers.fixtures import (  # noqa: F401 - shared session servers
    gcs_fake,
    gcs_store_on,
    http_server,
    rclone_fixed,
    rclone_server,
    s3_server,
    s3_store_on,
    unique_prefix,
    write_files,
)
from tests.servers.gcs_fake import FakeGCS
from tests.servers.http_static import StaticServer
from tests.servers.proxy import FaultProxy, Seen
from tests.servers.s3 import S3Server


@pytest.fixture(autouse=True)
def _metadata_service_as_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened without credentials fall back to the instance metadata service, as
    by default, whatever the environment says (a test that disables it says so)."""
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)


@pytest.fixture(scope="session")
def s3_proxy(request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    """A fault-free proxy in front of the S3 server: counts requests server-side."""
    server: S3Server = request.getfixturevalue("s3_server")
    proxy = FaultProxy(server.endpoint).start()
    yield proxy
    proxy.stop()


@dataclass
class Backend:
    """A fresh store on one server, a way to seed it and the server's request log."""

    name: str
    store: Store
    seed: Callable[[Mapping[str, bytes]], Awaitable[None]]
    server_log: Callable[[], list[tuple[str, str, str | None]]]  # (method, path, Range)
    reset_log: Callable[[], None]


def _proxy_log(proxy: FaultProxy) -> list[tuple[str, str, str | None]]:
    return [(s.method, s.path, s.range) for s in proxy.log]


def _store_seeder(store: Store) -> Callable[[Mapping[str, bytes]], Awaitable[None]]:
    async def seed(objects: Mapping[str, bytes]) -> None:
        for key, value in objects.items():
            await store.set(key, value)

    return seed


@pytest.fixture(params=["s3", "rclone", "gcs", "http"])
def backend(
    request: pytest.FixtureRequest,
) -> Backend:
    """Each request-accounting test runs on every server, counting on both sides."""
    prefix = unique_prefix()
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        proxy: FaultProxy = request.getfixturevalue("s3_proxy")
        store = s3_store_on(server, prefix, endpoint=proxy.url)
        return Backend("s3", store, _store_seeder(store), lambda: _proxy_log(proxy), proxy.reset)
    if request.param == "rclone":
        rclone: S3Server = request.getfixturevalue("rclone_server")
        fixed: FaultProxy = request.getfixturevalue("rclone_fixed")
        store = s3_store_on(rclone, prefix, endpoint=fixed.url, conditional_writes=False)
        return Backend(
            "rclone", store, _store_seeder(store), lambda: _proxy_log(fixed), fixed.reset
        )
    if request.param == "gcs":
        fake: FakeGCS = request.getfixturevalue("gcs_fake")
        store = gcs_store_on(fake, prefix)
        return Backend(
            "gcs",
            store,
            _store_seeder(store),
            lambda: list(fake.log),
            fake.log.clear,
        )
    web: StaticServer = request.getfixturevalue("http_server")
    folder: Path = web.root / prefix
    folder.mkdir()
    store = open_store(f"{web.url}/{prefix}")
    return Backend(
        "http",
        store,
        write_files(folder),
        lambda: list(web.log),
        web.log.clear,
    )


def range_span(header: str | None) -> tuple[int, int]:
    """``(start, end_exclusive)`` of a ``bytes=a-b`` header."""
    span = Seen("GET", "", header, None, None).range_span()
    assert span is not None, f"not a bounded range header: {header!r}"
    return span
