"""Fault injection: a seeded proxy in front of the S3 server answers 500/503, resets
connections and cuts bodies short. Reads return the right bytes or a typed error, never
wrong bytes; with the default retries every read succeeds at a 10 % fault rate."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest

from asyncshard.backends import open_store
from asyncshard.backends.cloud import CloudStore
from asyncshard.errors import AsyncShardError, StoreConnectionError, ThrottledError
from asyncshard.ranges import Range
from asyncshard.store import Store
from tests.servers._threaded import free_port
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FAULT_KINDS, FaultProxy
from tests.servers.s3 import S3Server

N_OBJECTS, RANGES_PER_OBJECT, OBJECT_SIZE = 40, 25, 64 * 1024
SEED = 20240601


def blob(i: int) -> bytes:
    return bytes((i * 31 + j * 7) % 256 for j in range(OBJECT_SIZE))


READS = [
    (f"obj/{i}", Range(r * 2000 + i, r * 2000 + i + 1500))
    for i in range(N_OBJECTS)
    for r in range(RANGES_PER_OBJECT)
]  # 1,000 distinct (key, range) reads


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    p = FaultProxy(s3_server.endpoint, seed=SEED).start()
    yield p
    p.stop()


@pytest.fixture
async def seeded(s3_server: S3Server, proxy: FaultProxy) -> AsyncIterator[str]:
    """A prefix holding the objects, written directly (not through the proxy). The proxy
    leaves the random prefix out of its fault draws: every run injects the same faults."""
    prefix = unique_prefix()
    proxy.ignore_in_path = prefix
    async with s3_store_on(s3_server, prefix) as store:
        await asyncio.gather(*(store.set(f"obj/{i}", blob(i)) for i in range(N_OBJECTS)))
    yield prefix


async def read_all(store: Store, n: int = len(READS)) -> list[bytes | BaseException]:
    results = await asyncio.gather(
        *(store.get(key, rng) for key, rng in READS[:n]), return_exceptions=True
    )
    return [r if isinstance(r, BaseException) else bytes(r or b"?") for r in results]


def check_never_wrong(results: list[bytes | BaseException]) -> Counter[str]:
    outcome: Counter[str] = Counter()
    expected = {i: blob(i) for i in range(N_OBJECTS)}
    for (key, rng), got in zip(READS, results, strict=True):
        if isinstance(got, BaseException):
            assert isinstance(got, AsyncShardError), f"untyped error: {got!r}"
            outcome[type(got).__name__] += 1
        else:
            assert got == expected[int(key.split("/")[1])][rng.start : rng.end], key
            outcome["ok"] += 1
    return outcome


async def test_without_retries_faults_surface_as_typed_errors(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    proxy.fault_rate = 0.3
    store = s3_store_on(s3_server, seeded, endpoint=proxy.url, max_retries=0)
    outcome = check_never_wrong(await read_all(store))
    faults = sum(proxy.faults.values())
    assert set(proxy.faults) == set(FAULT_KINDS)  # every kind of fault happened
    assert set(outcome) == {"ok", "StoreConnectionError"}
    # one attempt per read, but a 503 (throttling) is retried as the window allows
    throttled = proxy.faults["503"]
    assert outcome["StoreConnectionError"] == faults - throttled
    assert 200 < faults < 400
    assert len(proxy.log) == len(READS) + throttled


async def test_with_default_retries_every_read_succeeds_at_10_percent(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    proxy.fault_rate = 0.1
    store = s3_store_on(s3_server, seeded, endpoint=proxy.url)
    start = time.monotonic()
    outcome = check_never_wrong(await read_all(store))
    assert outcome == {"ok": len(READS)}
    assert sum(proxy.faults.values()) > 50 and set(proxy.faults) == set(FAULT_KINDS)
    # retries are not counted; restarts of a read whose body broke off are
    assert store.stats.requests["get"] == len(READS) + proxy.faults["truncate"]
    assert len(proxy.log) == len(READS) + sum(proxy.faults.values())
    assert time.monotonic() - start < 30


async def test_fault_pattern_is_reproducible(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    proxy.fault_rate = 0.3
    store = s3_store_on(s3_server, seeded, endpoint=proxy.url, max_retries=0)
    first = [isinstance(r, BaseException) for r in await read_all(store, 200)]
    proxy.reset()
    second = [isinstance(r, BaseException) for r in await read_all(store, 200)]
    assert first == second and any(first)


async def test_persistent_503_is_retried_until_the_throttle_timeout(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    """A 503 is throttling: retried however often (not ``max_retries`` times) until
    ``throttle_timeout`` runs out, then a ThrottledError (a StoreConnectionError)."""
    proxy.fault_rate, proxy.kinds = 1.0, ("503",)
    store = s3_store_on(s3_server, seeded, endpoint=proxy.url, max_retries=2, throttle_timeout=0.5)
    with pytest.raises(ThrottledError, match="503") as caught:
        await store.get("obj/0", Range(0, 10))
    assert isinstance(caught.value, StoreConnectionError)
    assert "requests/s" in str(caught.value) and caught.value.rate >= 0
    assert len(proxy.log) > 3  # more than the first attempt and max_retries retries
    assert isinstance(store, CloudStore) and store.window is not None
    assert store.window.state().throttles == len(proxy.log)


async def test_obstore_retries_come_back_when_retry_config_sets_them(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    """``retry_config={"max_retries": n}`` turns obstore's own retries on again (then a
    throttled request reaches the store, and its window, only after obstore's)."""
    proxy.fault_rate, proxy.kinds = 1.0, ("503",)
    store = s3_store_on(
        s3_server,
        seeded,
        endpoint=proxy.url,
        throttle_timeout=0.01,
        retry_config={"max_retries": 2, "backoff": {"init_backoff": timedelta(milliseconds=5)}},
    )
    with pytest.raises(ThrottledError):
        await store.get("obj/0", Range(0, 10))
    assert len(proxy.log) % 3 == 0  # each attempt of the store is three of obstore's


async def test_nothing_listening_is_a_quick_connection_error() -> None:
    store = open_store(
        "s3://bucket/p",
        endpoint=f"http://127.0.0.1:{free_port()}",
        access_key_id="a",
        secret_access_key="b",
        max_retries=1,
    )
    assert isinstance(store, CloudStore)
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="error sending request"):
        await store.get("k")
    assert time.monotonic() - start < 5


async def test_a_body_cut_short_is_retried_as_often_as_max_retries(
    s3_server: S3Server, proxy: FaultProxy, seeded: str
) -> None:
    """A body that keeps breaking off: obstore resumes it, then the store restarts the read
    (each restart counted), and gives up with a plain StoreConnectionError."""
    proxy.fault_rate, proxy.kinds = 1.0, ("truncate",)
    store = s3_store_on(s3_server, seeded, endpoint=proxy.url, max_retries=2)
    with pytest.raises(StoreConnectionError) as caught:
        await store.get("obj/0", Range(0, 4000))
    assert type(caught.value) is StoreConnectionError  # the private subclass stays inside
    assert store.stats.requests["get"] == 3  # the first read and two restarts
    assert 3 <= len(proxy.log) <= 9  # obstore's resumptions come on top: (1 + 2) ** 2


async def test_a_404_whose_body_breaks_off_is_read_again(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """obstore does not retry an error answer cut short; the store starts the read again."""
    proxy.fault_rate, proxy.kinds = 0.3, ("truncate",)
    prefix = proxy.ignore_in_path = unique_prefix()  # the same faults in every run
    store = s3_store_on(s3_server, prefix, endpoint=proxy.url)
    got = await asyncio.gather(*(store.get(f"missing/{i}") for i in range(50)))
    assert got == [None] * 50
    assert proxy.faults["truncate"] > 5
    assert store.stats.requests["get"] == len(proxy.log)  # every restart counted
