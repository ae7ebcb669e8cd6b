"""Fixtures of the conversion tests: the shared S3 server and a small Dask cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers.fixtures import s3_server  # noqa: F401 - the session S3 server (moto)


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    """A local ``dask.distributed`` cluster of two worker processes, one thread each."""
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
