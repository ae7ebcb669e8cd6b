"""Fixtures for the conformance suite (:mod:`asyncshard.testing`) run on the project's own
stores: the real servers and a Harness per cloud store (``tests/servers/fixtures.py``)."""

from tests.conformance.server_fixtures import asyncshard_server, served_store  # noqa: F401
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
