"""Fixtures of the conversion tests: the shared S3 server and a small Dask cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers.fixtures import (  # noqa: F401 - s3_server: the session S3 server (SeaweedFS)
    local_dask_client,
    s3_server,
)


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    """A local ``dask.distributed`` cluster of two worker processes, one thread each,
    passed to the conversions explicitly (not dask's default scheduler)."""
    with local_dask_client(2, default=False) as client:
        yield client
