"""The request window (asyncshard.window) on real servers behind a throttling front
(tests/servers/proxy.py with ``rate``): it shrinks under 503/429 and grows back, no
request fails on throttling within the time budget, bytes in flight stay under the
bound, and stores on one endpoint share one window. Asserted through the window's
counters and the front's own log, never through timing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
import uvloop

from asyncshard.backends import open_store
from asyncshard.backends.cloud import CloudStore
from asyncshard.convert import shard_store_async
from asyncshard.ranges import Range
from asyncshard.store import Store
from asyncshard.window import Window
from tests.convert.helpers import assert_readable, make_array, snapshot, store_snapshot
from tests.servers.fixtures import TEST_BUCKET, s3_store_on, unique_prefix
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.http_static import StaticServer
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server


@pytest.fixture
def front(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fresh front (its own port: its own window) in front of the S3 server."""
    proxy = FaultProxy(s3_server.endpoint).start()
    yield proxy
    proxy.stop()


def window_of(store: Store) -> Window:
    assert isinstance(store, CloudStore) and store.window is not None
    return store.window


async def seed(store: Store, n: int, size: int = 100) -> None:
    await asyncio.gather(*(store.set(f"o/{i}", bytes([i % 256]) * size) for i in range(n)))


async def read_all(store: Store, n: int) -> None:
    got = await asyncio.gather(*(store.get(f"o/{i}") for i in range(n)))
    assert [bytes(g or b"") for g in got] == [bytes([i % 256]) * 100 for i in range(n)]


async def test_the_window_shrinks_under_503_and_grows_back(
    s3_server: S3Server, front: FaultProxy
) -> None:
    store = s3_store_on(s3_server, unique_prefix(), endpoint=front.url)
    window = window_of(store)
    await seed(store, 200)
    before = window.state()
    assert before.cuts == 0 and before.cwnd >= 32

    front.throttle(50, burst=5)  # far below what the client asks for
    await read_all(store, 200)  # every read succeeds
    during = window.state()
    refused = front.stats()["refused"]
    assert refused > 0 and during.throttles == refused  # each refusal seen by the window
    assert during.cuts > 0 and during.cwnd < before.cwnd
    assert all(s.status == 503 for s in front.log if s.fault == "throttled")

    front.throttle(None)  # the store stops throttling
    for _ in range(3):
        await read_all(store, 200)
    after = window.state()
    assert after.throttles == during.throttles  # nothing refused any more
    assert after.cwnd > during.cwnd  # and the window grew back


async def test_429_with_retry_after_from_gcs_is_throttling(gcs_fake: FakeGCS) -> None:
    """GCS answers 429; the window treats it as throttling (obstore 0.12 does not pass the
    Retry-After header on, so the window's pacing stands in for it)."""
    proxy = FaultProxy(gcs_fake.url, throttle_status=429, retry_after=0.05).start()
    try:
        async with open_store(
            f"gs://{TEST_BUCKET}/{unique_prefix()}",
            service_account_key=service_account_key(proxy.url),
        ) as gcs:
            window = window_of(gcs)
            await seed(gcs, 100)
            proxy.throttle(40, burst=4)
            await read_all(gcs, 100)
            refused = [s for s in proxy.log if s.fault == "throttled"]
            assert refused and all(s.status == 429 for s in refused)
            assert window.state().throttles == len(refused) and window.state().cuts > 0
    finally:
        proxy.stop()


async def test_retry_after_pauses_every_admission() -> None:
    """A Retry-After given to the window holds back every new request until it passed
    (checked by the loop's turns, not by time: the pause is far longer than the test)."""
    window = Window()
    held = await window.acquire(10)
    window.throttled(retry_after=60)
    waiting = asyncio.ensure_future(window.acquire(10))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done() and window.state().in_flight == 1
    waiting.cancel()
    window.release(held)
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert window.state().in_flight == 0 and window.state().bytes_in_flight == 0


async def test_obstore_errors_carry_no_retry_after(http_server: StaticServer) -> None:
    """Why no cloud store honours Retry-After: obstore (0.11 and 0.12) hands a throttling
    answer on as an error with its status and body, without its headers. When this test
    fails, obstore passes the header on: wire it into :func:`.calls.call`."""
    (http_server.root / "retry-after").write_bytes(b"x")
    proxy = FaultProxy(http_server.url, throttle_status=429, retry_after=4321).start()
    try:
        proxy.throttle(0.001, burst=1)  # the first request passes, the next is refused
        store = obstore.store.HTTPStore.from_url(
            proxy.url, client_options={"allow_http": True}, retry_config={"max_retries": 0}
        )
        await obstore.get_async(store, "retry-after")
        with pytest.raises(obstore.exceptions.BaseError) as caught:
            await obstore.get_async(store, "retry-after")
        assert [s.status for s in proxy.log] == [200, 429]
        error = caught.value
        assert "429" in str(error) and "4321" not in str(error)  # status yes, header no
        public = {name for name in dir(error) if not name.startswith("_")}
        assert public <= {"args", "add_note", "with_traceback"}
        assert error.__cause__ is None and error.__context__ is None
    finally:
        proxy.stop()


async def test_a_conversion_through_a_throttling_front_completes(
    s3_server: S3Server, front: FaultProxy, tmp_path: Path
) -> None:
    """``shard --to`` of a few hundred chunk objects through a front that refuses most of
    what a fixed window would send: nothing fails, the copy reads back equal."""
    local = tmp_path / "src" / "arr"
    data = make_array(local, (16, 20), (1, 1), compressors=None, sparse=False)
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    direct = s3_server.options()
    async with open_store(f"s3://{s3_server.bucket}/{prefix}", **direct) as store:
        for key, value in snapshot(tmp_path / "src", skip=()).items():
            await store.set(f"flat/{key}", value)
        through = {**direct, "endpoint": front.url}
        front.throttle(100, burst=10)
        summary = await shard_store_async(
            f"s3://{s3_server.bucket}/{prefix}/flat",
            4,
            to=f"s3://{s3_server.bucket}/{prefix}/out",
            storage_options=through,
            to_storage_options=through,
        )
        assert summary.arrays_changed
        assert front.stats()["refused"] > 0  # it was throttled, and did not fail
        out = tmp_path / "out"
        for key, value in (await store_snapshot(store, "out/")).items():
            path = out / key.removeprefix("out/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(value)
        assert_readable(out / "arr", data)


async def test_bytes_in_flight_stay_under_the_bound(s3_server: S3Server, front: FaultProxy) -> None:
    """Writes and ranged reads of 1 MiB objects, 24 at once, with a 4 MiB bound: the
    window's high-water mark of bytes in flight stays under it (and reaches it)."""
    bound, size, n = 4 << 20, 1 << 20, 24
    store = s3_store_on(s3_server, unique_prefix(), endpoint=front.url, max_bytes_in_flight=bound)
    window = window_of(store)
    blobs = [bytes([i]) * size for i in range(n)]
    await asyncio.gather(*(store.set(f"big/{i}", b) for i, b in enumerate(blobs)))
    got = await asyncio.gather(*(store.get(f"big/{i}", Range(0, size)) for i in range(n)))
    assert [bytes(g or b"") for g in got] == blobs
    parts = await store.get_partial_values([(f"big/{i}", Range(10, size - 10)) for i in range(n)])
    assert all(len(p or b"") == size - 20 for p in parts)
    state = window.state()
    assert state.max_bytes == bound
    assert bound // 2 < state.peak_bytes <= bound
    assert state.peak_in_flight <= bound // size
    assert state.bytes_in_flight == 0 and state.in_flight == 0


async def test_stores_on_one_endpoint_share_one_window(
    s3_server: S3Server, front: FaultProxy
) -> None:
    one = s3_store_on(s3_server, unique_prefix(), endpoint=front.url)
    two = s3_store_on(s3_server, unique_prefix(), endpoint=front.url + "/")
    other = s3_store_on(s3_server, unique_prefix())  # the server itself: another endpoint
    assert window_of(one) is window_of(two) and window_of(one) is not window_of(other)
    start = window_of(one).state().completed
    await asyncio.gather(seed(one, 30), seed(two, 20))
    assert window_of(one).state().completed - start == 50
    assert len(front.log) == 50


async def test_a_throttled_request_cancelled_while_it_waits_gives_back_its_place() -> None:
    """A request throttled inside its slot waits for a place again; cancelled meanwhile
    it holds nothing: the window's counters come back to zero, never below."""
    window = Window()

    async def request() -> None:
        async with window.slot(100):
            await window.retry_after_throttle(retry_after=60)

    task = asyncio.ensure_future(request())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done() and window.state().in_flight == 0  # waiting, holding nothing
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = window.state()
    assert (state.in_flight, state.bytes_in_flight, state.throttles) == (0, 0, 1)


# -- one window, several event loops (threads, as Dask workers) -------------------------

#: Seconds a thread may take before the test calls it a deadlock (each needs well under 1).
DEADLOCK = 60.0


def in_threads(*jobs: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run each job on a loop of its own in a thread of its own (asyncio's and uvloop's
    loops in turn); re-raise the first error; fail, not hang, on a deadlock."""
    errors: list[BaseException] = []

    def run(i: int, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        factory = uvloop.new_event_loop if i % 2 else asyncio.new_event_loop
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(asyncio.wait_for(job(), DEADLOCK))
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLOCK + 10)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    if errors:
        raise errors[0]


def test_one_window_serves_stores_on_several_loops_at_once(s3_server: S3Server) -> None:
    """Four threads, each with its own event loop and its own store on one endpoint,
    read at once through a throttling front with a round trip: they share one window,
    whose bound on requests in flight holds across all of them, whose counters add up
    to what the front saw, and which comes back to nothing in flight; no deadlock."""
    front = FaultProxy(s3_server.endpoint, latency=0.01).start()
    try:
        prefix, bound, n = unique_prefix(), 6, 60
        seeded: list[Window] = []

        async def seeding() -> None:
            async with s3_store_on(s3_server, prefix, endpoint=front.url) as store:
                seeded.append(window_of(store))
                window_of(store).set_max_requests(bound)
                await seed(store, n)

        in_threads(seeding)  # its loop is gone before the readers start
        window = seeded[0]
        front.reset()
        front.throttle(150, burst=5)
        before = window.state()
        start = threading.Barrier(4)
        windows: list[Window] = []

        async def reader() -> None:
            async with s3_store_on(s3_server, prefix, endpoint=front.url) as store:
                windows.append(window_of(store))
                await asyncio.to_thread(start.wait, DEADLOCK)  # all four loops at once
                await read_all(store, n)

        in_threads(*[reader] * 4)
        assert all(w is window for w in windows)  # one window for the four loops
        after, seen = window.state(), front.stats()
        assert seen["refused"] > 0  # throttled: cuts and pacing timers across loops
        assert after.peak_in_flight <= bound
        assert after.in_flight == after.waiting == after.bytes_in_flight == 0
        assert after.throttles - before.throttles == seen["refused"]
        assert after.completed - before.completed == seen["seen"] - seen["refused"] == 4 * n
    finally:
        front.stop()


def test_pacing_outlives_the_loop_that_armed_it() -> None:
    """A Retry-After pause armed by a loop that then ends still admits the request
    another loop has queued meanwhile (a timer on the dispatching loop died with it)."""
    window = Window(max_requests=1)
    held_by_a, b_queued = threading.Event(), threading.Event()

    async def a() -> None:
        held = await window.acquire(10)
        held_by_a.set()
        await asyncio.to_thread(b_queued.wait, DEADLOCK)
        window.throttled(retry_after=0.2)
        window.release(held)  # the pause is armed here, on a loop about to end

    async def b() -> None:
        await asyncio.to_thread(held_by_a.wait, DEADLOCK)
        waiting = asyncio.ensure_future(window.acquire(10))
        while window.state().waiting == 0:
            await asyncio.sleep(0.001)
        b_queued.set()
        window.release(await asyncio.wait_for(waiting, 10))

    in_threads(a, b)
    state = window.state()
    assert (state.in_flight, state.waiting, state.completed, state.throttles) == (0, 0, 2, 1)
