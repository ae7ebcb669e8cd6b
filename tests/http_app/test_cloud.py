"""Serving a private S3 bucket (SeaweedFS, or MinIO via ASYNCSHARD_TEST_S3_ENDPOINT) to browsers."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from asyncshard.server.demo import CHUNK, ZARR_PATH, demo_volume
from asyncshard.store import Store
from tests.http_app.conftest import Served, ServeFactory
from tests.servers.fixtures import s3_server, s3_store_on, unique_prefix  # noqa: F401
from tests.servers.s3 import S3Server


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
