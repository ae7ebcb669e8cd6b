"""The session S3 server for the obspec tests."""

from tests.servers.fixtures import s3_server  # noqa: F401 - the session S3 server (SeaweedFS)
