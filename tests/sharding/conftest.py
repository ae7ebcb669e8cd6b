"""Fixtures for the engine-wide tests: the shared S3 server (SeaweedFS, or MinIO by env)."""

from tests.servers.fixtures import s3_server  # noqa: F401 - the session S3 server
