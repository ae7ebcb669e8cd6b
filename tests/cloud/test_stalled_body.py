"""A response body that stalls mid-transfer never blocks the event loop.

The server (its own thread, so a blocked loop could not stall it further) sends the
headers and part of the body at once, then nothing for :data:`STALL` seconds, then the
rest. While a cloud store reads it, a ticker on the event loop must keep ticking: a read
that waited for the body synchronously (a blocking ``bytes()`` on the response) would
stop the loop, and with it every other request of a server or a conversion.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import uvloop

from asyncshard.backends import open_store
from asyncshard.ranges import Range

STALL = 1.0
BODY = bytes(range(256)) * 256  # 64 KiB
SMALL = b"small chunk, stalled half way"


class StallingHandler(BaseHTTPRequestHandler):
    """Objects ``big`` and ``small``: headers and half the body, a stall, the rest."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _answer(self, *, send_body: bool) -> None:
        data = {"/big": BODY, "/small": SMALL}.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, body = 200, data
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if match:
            start, end = int(match.group(1)), min(int(match.group(2)) + 1, len(data))
            status, body = 206, data[start:end]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"v1"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if not send_body:
            return
        half = len(body) // 2
        self.wfile.write(body[:half])
        self.wfile.flush()
        time.sleep(STALL)
        self.wfile.write(body[half:])
        self.wfile.flush()


@pytest.fixture
def stalling() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StallingHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def largest_pause(during: asyncio.Task[object]) -> float:
    """The longest time the event loop went without running a 10 ms ticker while
    ``during`` ran."""
    loop = asyncio.get_running_loop()
    last, worst = loop.time(), 0.0
    while not during.done():
        await asyncio.sleep(0.01)
        now = loop.time()
        worst, last = max(worst, now - last), now
    return worst


@pytest.mark.parametrize(
    ("key", "rng", "expected"),
    [
        ("big", None, BODY),
        ("big", Range(1000, 40_000), BODY[1000:40_000]),
        ("small", None, SMALL),
        ("small", Range(2, 12), SMALL[2:12]),
    ],
    ids=["whole", "range", "small-whole", "small-range"],
)
async def test_a_stalled_body_does_not_block_the_loop(
    stalling: str, key: str, rng: Range | None, expected: bytes
) -> None:
    await check_reads(stalling, key, rng, expected)


@pytest.mark.parametrize(
    ("key", "rng", "expected"),
    [("big", None, BODY), ("small", Range(2, 12), SMALL[2:12])],
    ids=["whole", "small-range"],
)
def test_a_stalled_body_does_not_block_uvloop(
    stalling: str, key: str, rng: Range | None, expected: bytes
) -> None:
    """The same on uvloop, the loop of asyncshard's own entry points."""
    assert uvloop.run(check_reads(stalling, key, rng, expected)) is uvloop.Loop


async def check_reads(url: str, key: str, rng: Range | None, expected: bytes) -> type:
    """Read ``key`` plainly and conditioned at once while both bodies stall; the loop's
    type."""
    store = open_store(url)
    try:
        version = (await store.head(key)).version  # type: ignore[union-attr]
        started = time.monotonic()
        plain = asyncio.ensure_future(store.get(key, rng))
        conditioned = asyncio.ensure_future(store.get_object(key, rng, if_match=version))
        both = asyncio.ensure_future(asyncio.gather(plain, conditioned))
        pause = await largest_pause(both)
        assert bytes(await plain or b"") == expected
        result = await conditioned
        assert result is not None and bytes(result.data) == expected
        assert time.monotonic() - started >= STALL * 0.9, "the bodies did stall"
        assert pause < 0.5, f"the event loop stood still for {pause:.2f} s during the reads"
    finally:
        await store.close()
    return type(asyncio.get_running_loop())
