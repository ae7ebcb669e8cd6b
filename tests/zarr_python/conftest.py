"""Fixtures for the zarr-python store tests: the shared S3 and HTTP servers, fresh places."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import open_store
from asyncshard.zarr_python import ZarrStore
from tests.servers.fixtures import (  # noqa: F401 - session servers
    http_server,
    local_dask_client,
    s3_server,
    unique_prefix,
)
from tests.servers.s3 import S3Server


@pytest.fixture
async def s3_place(
    s3_server: S3Server,  # noqa: F811 - the imported session fixture
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A fresh ``s3://`` URL on the test server and the options to open it.

    Emptied afterwards on an external server (MinIO); a fresh SeaweedFS forgets everything anyway.
    """
    url = f"s3://{s3_server.bucket}/{unique_prefix()}"
    options = s3_server.options()
    yield url, options
    if s3_server.external:
        async with open_store(url, **options) as store:
            await store.erase_prefix("")


@pytest.fixture(params=["local", "s3"])
def zarr_store(request: pytest.FixtureRequest, tmp_path: Path) -> ZarrStore:
    """An empty pass-through ZarrStore on local files, then on S3, opened from a URL."""
    if request.param == "local":
        return ZarrStore(str(tmp_path / "root"))
    url, options = request.getfixturevalue("s3_place")
    return ZarrStore(url, **options)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A local dask cluster of 4 worker processes, one thread each (once per module)."""
    with local_dask_client(4) as client:
        yield client


@pytest.fixture(params=["local", "s3"])
def url_place(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A URL other processes can reopen (local folder or S3 prefix) and its options."""
    if request.param == "local":
        return f"file://{tmp_path / 'root'}", {}
    url, options = request.getfixturevalue("s3_place")
    return url, options
