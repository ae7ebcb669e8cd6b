"""Fixtures for the Zarr tests: the shared S3 test server."""

from tests.servers.fixtures import s3_server  # noqa: F401 - session fixture for S3 interop
