"""Conditional PUT and DELETE are atomic on the store, never check-then-act."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from asyncshard.backends import MemoryStore
from tests.http_app.conftest import ServeFactory

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUNDS = 600
PARALLEL = 24


async def test_conditional_delete_never_removes_a_newer_put(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    """``DELETE If-Match: <v1>`` racing an unconditional ``PUT v2``: whichever goes first,
    the acknowledged ``PUT`` must survive (a delete after it fails its precondition)."""
    violations: list[tuple[int, int, int]] = []
    jitter = random.Random(0)

    async def one_round(n: int) -> None:
        url = f"{s.url}/race/{n}"
        async with http.put(url, data=b"v1", headers=AUTH) as r:
            etag = r.headers["ETag"]

        async def delete() -> int:
            async with http.delete(url, headers={**AUTH, "If-Match": etag}) as r:
                return r.status

        async def put() -> int:
            await asyncio.sleep(jitter.uniform(0, 0.002))  # land anywhere in the DELETE
            async with http.put(url, data=b"v2", headers=AUTH) as r:
                return r.status

        statuses = await asyncio.gather(delete(), put())
        assert statuses[0] in (204, 412) and statuses[1] in (201, 204), statuses
        async with http.get(url) as r:
            if r.status != 200 or await r.read() != b"v2":
                violations.append((statuses[0], statuses[1], r.status))

    async with serve(writable=True, token=TOKEN) as s:
        sem = asyncio.Semaphore(PARALLEL)

        async def bounded(n: int) -> None:
            async with sem:
                await one_round(n)

        await asyncio.gather(*(bounded(n) for n in range(ROUNDS)))
    assert violations == [], f"{len(violations)} of {ROUNDS} rounds lost the acknowledged PUT"


async def test_conditional_put_is_atomic_under_if_unmodified_since(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    """``If-Unmodified-Since`` alone makes a PUT conditional too (412 when it changed)."""
    async with serve(writable=True, token=TOKEN) as s:
        async with http.put(f"{s.url}/k", data=b"v1", headers=AUTH) as r:
            assert r.status == 201
        async with http.head(f"{s.url}/k") as r:
            modified = r.headers["Last-Modified"]
        old = "Mon, 01 Jan 2001 00:00:00 GMT"
        headers = {**AUTH, "If-Unmodified-Since": old}
        async with http.put(f"{s.url}/k", data=b"v2", headers=headers) as r:
            assert r.status == 412
        headers = {**AUTH, "If-Unmodified-Since": modified}
        async with http.put(f"{s.url}/k", data=b"v2", headers=headers) as r:
            assert r.status == 204


async def test_conditional_delete_of_missing_and_wildcards(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        url = f"{s.url}/gone"
        async with http.delete(url, headers={**AUTH, "If-Match": "*"}) as r:
            assert r.status == 412, "If-Match: * needs an object"
        async with http.delete(url, headers={**AUTH, "If-None-Match": "*"}) as r:
            assert r.status == 204, "nothing to delete, and the condition holds"
        async with http.put(url, data=b"x", headers=AUTH) as r:
            assert r.status == 201
        async with http.delete(url, headers={**AUTH, "If-None-Match": "*"}) as r:
            assert r.status == 412
        async with http.delete(url, headers={**AUTH, "If-Match": "*"}) as r:
            assert r.status == 204
        async with http.get(url) as r:
            assert r.status == 404


class NoConditionalDeletes(MemoryStore):
    """A real in-memory store that, like S3 and GCS here, cannot delete conditionally."""

    @property
    def supports_conditional_deletes(self) -> bool:
        return False


@pytest.mark.parametrize("header", ["If-Match", "If-None-Match", "If-Unmodified-Since"])
async def test_conditional_delete_without_store_support_is_501(
    serve: ServeFactory, http: aiohttp.ClientSession, header: str
) -> None:
    store = NoConditionalDeletes()
    await store.set("k", b"v")
    value = {"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}.get(header, "*")
    async with serve(store=store, writable=True, token=TOKEN) as s:
        async with http.delete(f"{s.url}/k", headers={**AUTH, header: value}) as r:
            assert r.status == 501
            assert "cannot delete conditionally" in await r.text()
        assert await store.get("k") == b"v", "nothing was deleted"
        async with http.delete(f"{s.url}/k", headers=AUTH) as r:
            assert r.status == 204, "an unconditional DELETE still works"
        assert await store.get("k") is None
