"""Serving a private S3 bucket (SeaweedFS, or MinIO via ASYNCSHARD_TEST_S3_ENDPOINT) to browsers."""

from __future__ import annotations

import dataclasses
import gzip
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from asyncshard.backends import open_store
from asyncshard.server.demo import CHUNK, ZARR_PATH, demo_volume
from asyncshard.store import Store
from tests.http_app.conftest import Served, ServeFactory
from tests.http_app.process import SERVE, Running
from tests.servers.fixtures import s3_server, s3_store_on, unique_prefix  # noqa: F401
from tests.servers.s3 import S3Server
from tests.servers.seaweedfs import READER_KEY, READER_SECRET


@pytest.fixture
async def bucket(s3_server: S3Server, demo_folder: Path) -> AsyncIterator[Store]:  # noqa: F811
    """A fresh prefix of the test bucket holding the demo volume and a plain object."""
    async with s3_store_on(s3_server, unique_prefix()) as store:
        for path in demo_folder.rglob("*"):
            if path.is_file():
                await store.set(path.relative_to(demo_folder).as_posix(), path.read_bytes())
        await store.set("plain/obj", bytes(range(256)))
        yield store
        if s3_server.external:
            await store.erase_prefix("")


@pytest.fixture
async def served_bucket(serve: ServeFactory, bucket: Store) -> AsyncIterator[Served]:
    async with serve(store=bucket, close_store=False) as s:
        yield s


async def test_ranges_and_validators_from_s3(
    served_bucket: Served, http: aiohttp.ClientSession
) -> None:
    url = f"{served_bucket.url}/plain/obj"
    async with http.get(url, headers={"Range": "bytes=-6"}) as r:
        assert (r.status, await r.read()) == (206, bytes(range(250, 256)))
        assert r.headers["Content-Range"] == "bytes 250-255/256"
        etag = r.headers["ETag"]
    async with http.get(url, headers={"If-None-Match": etag}) as r:
        assert r.status == 304
    async with http.get(url, headers={"Range": "bytes=256-"}) as r:
        assert (r.status, r.headers["Content-Range"]) == (416, "bytes */256")
    async with http.head(url) as r:
        assert r.headers["Content-Length"] == "256"
    async with http.get(f"{served_bucket.url}/plain/missing") as r:
        assert r.status == 404
    async with http.get(f"{served_bucket.url}/plain/?list=json") as r:
        assert (await r.json())["keys"] == ["obj"]


async def test_unsharded_view_of_an_s3_bucket(
    serve: ServeFactory, bucket: Store, http: aiohttp.ClientSession
) -> None:
    async with serve(store=bucket, unshard=True, close_store=False) as s:
        async with http.get(f"{s.url}/{ZARR_PATH}/zarr.json") as r:
            await r.read()
        bucket.stats.reset()
        async with http.get(f"{s.url}/{ZARR_PATH}/c/2/5/6") as r:
            block = np.frombuffer(gzip.decompress(await r.read()), np.uint8)
        assert bucket.stats.requests["get"] == 2, "cold: shard index, then the chunk"
        bucket.stats.reset()
        async with http.get(f"{s.url}/{ZARR_PATH}/c/2/5/7") as r:
            await r.read()
        assert bucket.stats.requests["get"] == 1, "warm: the index is cached in the server"
    expected = demo_volume()[64:96, 160:192, 192:224]
    assert (block.reshape((CHUNK,) * 3) == expected).all()


async def test_backend_failures_answer_a_request_id_and_log_the_details(
    serve: ServeFactory,
    s3_server: S3Server,  # noqa: F811
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store whose credentials the server refuses (served without the start-up check of
    ``asyncshard serve``): every read fails, and the answers name neither the bucket nor
    the credentials' source, to any origin; the server's log does, under the same id."""
    options = s3_server.options(secret_access_key="not-the-secret")
    store = open_store(f"s3://{s3_server.bucket}/{unique_prefix()}", **options)
    async with serve(store=store) as s:
        for path in ("plain/obj", "plain/?list=json"):
            async with http.get(f"{s.url}/{path}", headers={"Origin": "https://x"}) as r:
                assert r.status == 502
                assert r.headers["Access-Control-Allow-Origin"] == "*"
                body = await r.text()
                request_id = r.headers["X-Request-Id"]
            assert body == (
                f"502 Bad Gateway: the storage backend failed (request id {request_id})\n"
            )
            logged = [m for m in caplog.messages if m.startswith(f"request {request_id}: ")]
            assert len(logged) == 1
            assert f"GET /{path}: StoreAuthenticationError" in logged[0]
            assert s3_server.bucket in logged[0] and "credentials from" in logged[0]


def _storage_flags(s3_server: S3Server, key: str, secret: str) -> list[str]:  # noqa: F811
    """The storage flags of ``asyncshard serve`` for the test server, as ``key``."""
    options = {"access_key_id": key, "secret_access_key": secret, "region": s3_server.region}
    flags = ["--endpoint", s3_server.endpoint]
    for name, value in options.items():
        flags += ["-o", f"{name}={value}"]
    return flags


def _serve_s3(s3_server: S3Server, secret: str, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    """``asyncshard serve`` of the test bucket with ``secret``, until it exits."""
    command = [
        *SERVE,
        f"s3://{s3_server.bucket}/{unique_prefix()}",
        *_storage_flags(s3_server, s3_server.access_key, secret),
        "--port",
        "0",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def test_serve_starts_when_only_listing_is_denied(
    s3_server: S3Server,  # noqa: F811
    bucket: Store,
) -> None:
    """Credentials the bucket accepts but may not list with (objects are readable): the
    server starts, says so in its log, and serves the objects."""
    if s3_server.name != "seaweedfs":
        pytest.skip("the read-only identity is SeaweedFS's (tests/servers/seaweedfs.py)")
    server = Running(bucket.url, *_storage_flags(s3_server, READER_KEY, READER_SECRET))
    try:
        base = server.url()
        async with aiohttp.ClientSession() as http, http.get(f"{base}/plain/obj") as r:
            assert (r.status, await r.read()) == (200, bytes(range(256)))
    finally:
        assert server.stop() == 0
    assert f"listing {bucket.url} is denied; serving it unchecked" in server.stderr()


@pytest.mark.parametrize("args", [[], ["--writable", "--token", "t"], ["--workers", "2"]])
def test_serve_refuses_credentials_the_bucket_refuses(
    s3_server: S3Server,  # noqa: F811
    args: list[str],
) -> None:
    result = _serve_s3(s3_server, "not-the-secret", *args)
    assert result.returncode == 1, result
    assert "Serving" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"Error: cannot serve s3://{s3_server.bucket}/")
    assert "the credentials were refused" in lines[0]
    assert "SignatureDoesNotMatch" in lines[0]


def test_serve_refuses_a_missing_bucket(s3_server: S3Server) -> None:  # noqa: F811
    missing = dataclasses.replace(s3_server, bucket="no-such-bucket-here")
    result = _serve_s3(missing, s3_server.secret_key, "--writable", "--token", "t")
    assert result.returncode == 1, result
    assert "Serving" not in result.stdout
    assert "bucket 'no-such-bucket-here' does not exist" in result.stderr
