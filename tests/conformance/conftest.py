"""Store fixtures for the conformance suite.

A Store implementation joins the suite by adding one fixture that yields a
:class:`Harness` around a fresh, empty store, and naming it in ``STORE_FIXTURES``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncshard.backends import LocalStore, MemoryStore
from tests.conformance.harness import Harness
from tests.servers.fixtures import (  # noqa: F401 - fixtures for the cloud backends
    gcs_fake,
    gcs_store,
    http_server,
    http_store,
    rclone_fixed,
    rclone_server,
    rclone_store,
    s3_server,
    s3_store,
    webdav_server,
    webdav_store,
)

STORE_FIXTURES = ["memory_store", "local_store"]
# Cloud backends on real local servers (moto or MinIO, rclone, the GCS fake, HTTP, and
# HTTP with WebDAV listing on rclone serve webdav).
STORE_FIXTURES += ["s3_store", "rclone_store", "gcs_store", "http_store", "webdav_store"]
from tests.conformance.server_fixtures import asyncshard_server, served_store  # noqa: E402, F401

STORE_FIXTURES += ["served_store"]


@pytest.fixture
async def memory_store() -> AsyncIterator[Harness]:
    async with MemoryStore() as store:
        yield Harness(store)


@pytest.fixture
async def local_store(tmp_path: Path) -> AsyncIterator[Harness]:
    async with LocalStore(tmp_path / "root") as store:
        yield Harness(store)


@pytest.fixture(params=STORE_FIXTURES)
def harness(request: pytest.FixtureRequest) -> Harness:
    """Each conformance test runs once per store fixture."""
    h: Harness = request.getfixturevalue(request.param)
    return h


@pytest.fixture
def writable(harness: Harness) -> Harness:
    """The harness, for tests of writes: skipped on read-only stores, saying so."""
    if not harness.store.supports_writes:
        pytest.skip(f"{harness.store!r} is read-only by design; write tests do not apply")
    return harness


@pytest.fixture
def listable(harness: Harness) -> Harness:
    """The harness, for listing tests: skipped on stores that cannot list, saying so."""
    if not harness.store.supports_listing:
        pytest.skip(f"{harness.store!r} has no listing; listing tests do not apply")
    return harness
