"""A reverse proxy for tests: fault injection, quirk fixing, link shaping, request log.

``FaultProxy`` forwards every request unchanged (the ``Host`` header included, so AWS
SigV4 signatures made for the proxy's address stay valid upstream) and can

* inject faults at ``fault_rate``: answer 500 or 503, reset the connection before
  answering, or send the headers of a good answer and cut its body short (then reset);
  opt-in (``kinds=ALL_FAULT_KINDS``): ``lost``, forward the request and reset the
  connection instead of answering (the server acted, the client cannot know);
  which request gets which fault is a pure function of ``seed``, the request line, its
  ``Range`` header and how many times that same request was seen before, so a run is
  reproducible however concurrent requests interleave (``ignore_in_path``, e.g. a test's
  random prefix, is left out of the request line, so that it is reproducible across runs);
* rewrite ``200`` answers that carry ``Content-Range`` to ``206`` (``fix_ranged_200``),
  the explicit workaround for ``rclone serve s3`` (see docs/cloud.md);
* add latency and cap bandwidth per response, to model a remote link on loopback;
* throttle (``rate``): a token bucket of ``rate`` requests per second (``burst`` deep);
  a request finding it empty is refused as a throttling store does, ``503`` with S3's
  ``SlowDown`` body and no ``Retry-After`` (S3), or ``429`` with ``rateLimitExceeded``
  and a ``Retry-After`` of ``retry_after`` seconds when given (GCS), logged with the
  fault ``throttled``; ``GET /__proxy__/stats`` answers its counters as JSON;
* log what it saw (method, path, ``Range`` header, status, fault) for server-side checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from yarl import URL

from tests.servers._threaded import ThreadedApp

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
}
FAULT_KINDS = ("500", "503", "reset", "truncate")
#: The default kinds plus ``lost``: the request reaches the server, its answer does not.
ALL_FAULT_KINDS = (*FAULT_KINDS, "lost")
#: S3's answer to a request above its rate (503, no Retry-After).
SLOW_DOWN = (
    "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
)
#: GCS's (429; its JSON API says ``rateLimitExceeded`` too).
RATE_LIMIT_EXCEEDED = (
    "<Error><Code>SlowDown</Code><Message>rateLimitExceeded: The rate of requests is too "
    "high.</Message></Error>"
)


@dataclass
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved; thread-safe."""

    rate: float
    burst: float
    _tokens: float = -1.0
    _at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        """Whether a token was there (and is now taken)."""
        now = time.monotonic()
        with self._lock:
            if self._tokens < 0:
                self._tokens, self._at = self.burst, now
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it."""

    method: str
    path: str
    range: str | None
    status: int | None
    fault: str | None

    def range_span(self) -> tuple[int, int] | None:
        """``(start, end_exclusive)`` of a ``bytes=a-b`` header, else ``None``."""
        if not self.range or not self.range.startswith("bytes="):
            return None
        head, _, tail = self.range[6:].partition("-")
        if not head or not tail:
            return None
        return int(head), int(tail) + 1


@dataclass
class FaultProxy:
    """Configuration and log of one proxy; start it with :meth:`start`."""

    upstream: str
    fault_rate: float = 0.0
    seed: int = 0
    kinds: tuple[str, ...] = FAULT_KINDS
    methods: tuple[str, ...] | None = None  # inject faults only into these methods
    ignore_in_path: str = ""  # left out of the request line that picks a fault
    fix_ranged_200: bool = False
    latency: float = 0.0
    bandwidth: float | None = None  # bytes per second per response
    rate: float | None = None  # requests per second forwarded at most (token bucket)
    burst: float = 1.0  # requests the bucket saves up
    throttle_status: int = 503  # 503 (S3 SlowDown) or 429 (GCS)
    retry_after: float | None = None  # seconds, sent with each refusal when given
    log: list[Seen] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    _seen: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadedApp | None = None
    _bucket: TokenBucket | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "proxy not started"
        return self._server.url

    def start(self) -> FaultProxy:
        self._server = ThreadedApp(self._app, f"proxy->{self.upstream}").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def reset(self) -> None:
        """Clear the log, the fault counters and the per-request occurrence counts."""
        with self._lock:
            self.log.clear()
            self.faults.clear()
            self._seen.clear()

    def throttle(self, rate: float | None, burst: float = 1.0) -> None:
        """Refuse requests above ``rate`` per second from now on (``None``: never)."""
        self.rate, self.burst = rate, burst
        self._bucket = None

    def stats(self) -> dict[str, int]:
        """Requests seen and refused for their rate (``throttled``)."""
        with self._lock:
            return {"seen": len(self.log), "refused": self.faults["throttled"]}

    # -- internals ----------------------------------------------------------------------

    async def _app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        session: aiohttp.ClientSession | None = None

        async def on_startup(_: web.Application) -> None:
            nonlocal session
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=200),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )

        async def on_cleanup(_: web.Application) -> None:
            if session is not None:
                await session.close()

        async def handle(request: web.Request) -> web.StreamResponse:
            assert session is not None
            if request.path == "/__proxy__/stats":
                return web.Response(text=json.dumps(self.stats()))
            refusal = self._refuse(request)
            if refusal is not None:
                return refusal
            return await self._forward(session, request)

        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
        app.router.add_route("*", "/{tail:.*}", handle)
        return app

    def _refuse(self, request: web.Request) -> web.Response | None:
        """The throttling answer when the token bucket is empty, else ``None``."""
        if self.rate is None:
            return None
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate, self.burst)
        if self._bucket.take():
            return None
        status = self.throttle_status
        self._record(request, status, "throttled")
        headers = {} if self.retry_after is None else {"Retry-After": f"{self.retry_after:g}"}
        body = SLOW_DOWN if status == 503 else RATE_LIMIT_EXCEEDED
        return web.Response(
            status=status, text=body, content_type="application/xml", headers=headers
        )

    def _pick_fault(self, request: web.Request) -> str | None:
        path = (
            request.raw_path.replace(self.ignore_in_path, "")
            if self.ignore_in_path
            else (request.raw_path)
        )
        key = f"{request.method} {path} {request.headers.get('Range')}"
        with self._lock:
            n = self._seen[key]
            self._seen[key] += 1
        if self.fault_rate <= 0 or (self.methods and request.method not in self.methods):
            return None
        digest = hashlib.sha256(f"{self.seed}|{key}|{n}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.fault_rate:
            return None
        return self.kinds[digest[8] % len(self.kinds)]

    def _record(self, request: web.Request, status: int | None, fault: str | None) -> None:
        seen = Seen(request.method, request.path, request.headers.get("Range"), status, fault)
        with self._lock:
            self.log.append(seen)
            if fault:
                self.faults[fault] += 1

    @staticmethod
    def _reset(request: web.Request) -> None:
        """Drop the client connection with a TCP reset."""
        transport = request.transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    async def _forward(
        self, session: aiohttp.ClientSession, request: web.Request
    ) -> web.StreamResponse:
        fault = self._pick_fault(request)
        body = await request.read()
        if fault in ("500", "503"):
            self._record(request, int(fault), fault)
            code = "InternalError" if fault == "500" else "SlowDown"
            xml = f"<Error><Code>{code}</Code><Message>injected fault</Message></Error>"
            return web.Response(status=int(fault), text=xml, content_type="application/xml")
        if fault == "reset":
            self._record(request, None, fault)
            self._reset(request)
            raise asyncio.CancelledError  # nothing more to send on this connection
        if self.latency:
            await asyncio.sleep(self.latency)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.pop("Content-Length", None)
        url = URL(self.upstream + request.raw_path, encoded=True)
        async with session.request(
            request.method,
            url,
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
        ) as up:
            payload = await up.read()
            status = up.status
            if fault == "lost":  # the server acted; the client never hears of it
                self._record(request, status, fault)
                self._reset(request)
                raise asyncio.CancelledError
            if (
                self.fix_ranged_200
                and status == 200
                and "Range" in request.headers
                and "Content-Range" in up.headers
            ):
                status = 206
            resp = web.StreamResponse(status=status)
            for k, v in up.headers.items():
                if k.lower() not in HOP_BY_HOP and k.lower() not in ("date", "server"):
                    resp.headers.add(k, v)
        if fault == "truncate" and (request.method == "HEAD" or not payload):
            fault = None  # nothing to cut short: the answer goes through intact
        self._record(request, status, fault)
        await resp.prepare(request)
        if request.method == "HEAD" or not payload:
            await resp.write_eof()
            return resp
        if fault == "truncate":
            await resp.write(payload[: len(payload) // 2])
            await asyncio.sleep(0.001)
            self._reset(request)
            raise asyncio.CancelledError
        await self._send(resp, payload)
        await resp.write_eof()
        return resp

    async def _send(self, resp: web.StreamResponse, payload: bytes) -> None:
        if not self.bandwidth:
            await resp.write(payload)
            return
        step = 64 * 1024
        for i in range(0, len(payload), step):
            chunk = payload[i : i + step]
            await resp.write(chunk)
            await asyncio.sleep(len(chunk) / self.bandwidth)
