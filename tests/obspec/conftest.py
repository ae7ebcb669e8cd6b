"""The session S3 server for the obspec tests, and obstore clients of it."""

from __future__ import annotations

from typing import Any

import obstore.store

from tests.servers.fixtures import s3_server, unique_prefix  # noqa: F401 - the session server
from tests.servers.s3 import S3Server


def s3_client(server: S3Server, bucket: str | None = None, **options: Any) -> obstore.store.S3Store:
    """An obstore ``S3Store`` on ``server`` (its bucket, or ``bucket``) under a fresh prefix."""
    return obstore.store.S3Store(
        bucket or server.bucket,
        prefix=unique_prefix(),
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        client_options={"allow_http": True},
        **options,
    )
