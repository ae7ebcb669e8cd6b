"""A long round trip (asyncshard.window): slow start grows the window per round trip,
and range coalescing over-fetches up to the window's reach to save requests, within
``max_gap``. Asserted through the window's counters and the front's own log (the
round trip is injected where the assertion depends on it), never through timing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from asyncshard.backends.cloud import CloudStore
from asyncshard.partial import slack_of
from asyncshard.ranges import OVERFETCH_SLACK, Range
from asyncshard.window import LONG_ROUND_TRIP, Window
from asyncshard.wrapper import WrapperStore
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server

CHUNK = 32 << 10
#: Two of every four chunks of a 16-chunk shard: what a region cut across its inner
#: chunk order wants (runs of two chunks, gaps of two).
REGION = [c for c in range(16) if c % 4 < 2]


@pytest.fixture
def front(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fresh front (its own port: its own window) in front of the S3 server."""
    proxy = FaultProxy(s3_server.endpoint).start()
    yield proxy
    proxy.stop()


async def read_region(store: CloudStore, front: FaultProxy, blob: bytes) -> list[tuple[int, int]]:
    """Read :data:`REGION` of ``shard``; the byte spans of the GETs the front saw."""
    front.reset()
    ranges = [Range(c * CHUNK, (c + 1) * CHUNK) for c in REGION]
    got = await store.get_partial_values([("shard", r) for r in ranges])
    assert [bytes(g or b"") for g in got] == [blob[r.start : r.end] for r in ranges]
    return sorted(s.range_span() or (0, 0) for s in front.log if s.method == "GET")


async def test_a_long_round_trip_reads_a_region_in_fewer_requests(
    s3_server: S3Server, front: FaultProxy
) -> None:
    store = s3_store_on(s3_server, unique_prefix(), endpoint=front.url)
    assert isinstance(store, CloudStore) and store.window is not None
    blob = bytes(i * 7 % 251 for i in range(16 * CHUNK))
    await store.set("shard", blob)
    wanted = len(REGION) * CHUNK

    store.window.assume(round_trip=LONG_ROUND_TRIP / 10, byte_rate=1e9)  # loopback
    assert store.window.reach() == 0 and slack_of(store) == OVERFETCH_SLACK
    short = await read_region(store, front, blob)
    assert len(short) == 4  # the over-fetch bound (1.5x wanted) splits the region
    assert all(b - a <= 1.5 * wanted for a, b in short)

    store.window.assume(round_trip=0.06, byte_rate=50e6)  # 3 MB in one round trip
    assert slack_of(store) == store.max_gap  # the reach, at most the gap
    assert slack_of(WrapperStore(store)) == store.max_gap  # a wrapper plans with it too
    long = await read_region(store, front, blob)
    assert len(long) == 1  # one request in place of four
    ((a, b),) = long
    assert b - a - wanted <= store.max_gap  # over-fetch still bounded


async def test_slow_start_grows_per_round_trip_on_a_long_round_trip() -> None:
    """Requests held 20 ms, far more wanted than the initial window: each round trip's
    completions let the window grow, without waiting for 100 ms rate samples
    (which would keep it at 32 for the first five round trips)."""
    window = Window()

    async def request() -> None:
        async with window.slot(1):
            await asyncio.sleep(0.02)

    await asyncio.gather(*(request() for _ in range(1000)))
    state = window.state()
    assert state.cuts == 0 and state.min_rtt is not None and state.min_rtt >= LONG_ROUND_TRIP
    assert state.peak_in_flight >= 256


async def test_a_throttling_store_on_a_long_round_trip_costs_few_refusals() -> None:
    """Slow start overshoots a store that throttles at 1,000 requests/s with a 100-request
    burst (60 ms round trip, a model server: a token bucket): the first refusals end slow
    start, every request completes and few are refused (3.8 % measured; 2.4 % with TCP's
    doubling), counted by the window and by the model alike."""
    window, rate, burst = Window(), 1000.0, 100.0
    loop = asyncio.get_running_loop()
    bucket = {"tokens": burst, "at": loop.time()}
    refused = served = 0

    def admit() -> bool:
        now = loop.time()
        bucket["tokens"] = min(burst, bucket["tokens"] + (now - bucket["at"]) * rate)
        bucket["at"] = now
        if bucket["tokens"] < 1:
            return False
        bucket["tokens"] -= 1
        return True

    async def request() -> None:
        nonlocal refused, served
        async with window.slot(1):
            while True:
                await asyncio.sleep(0.03)
                ok = admit()
                await asyncio.sleep(0.03)
                if ok:
                    served += 1
                    return
                refused += 1
                await window.retry_after_throttle()

    await asyncio.wait_for(asyncio.gather(*(request() for _ in range(4000))), 120)
    state = window.state()
    assert served == 4000 and state.completed == 4000
    assert state.throttles == refused > 0  # slow start did overshoot, and heard of it
    assert state.ssthresh != float("inf") and state.cuts >= 1
    assert refused <= 0.1 * (served + refused)
    assert state.in_flight == 0 and state.waiting == 0
