"""The asyncshard HTTP server: any Store served to web viewers (aiohttp).

:func:`make_app` builds the application from a store and an :class:`~.config.AppConfig`;
``asyncshard serve`` (``command.py``) runs it. Here: dispatch, CORS and the request log;
``reads.py`` answers ``GET``/``HEAD``, ``writes.py`` ``PUT``/``DELETE``, ``responses.py``
maps errors to statuses. What it answers (RFC 9110):

* ``GET``/``HEAD /key``: the object, with an exact ``Content-Length``, ``ETag`` (from the
  store's version), ``Last-Modified`` when known, ``Accept-Ranges: bytes`` and the
  configured ``Cache-Control``; ``404`` when missing. Bodies are streamed through the
  store in ranges of at most ``piece_size`` bytes (4 MiB): a large object is never held
  whole. Later pieces are read conditioned on the first one's version, so an object
  replaced mid-transfer aborts the connection instead of mixing two versions.
* Memory under slow clients is bounded: every piece is reserved from a budget of
  ``buffer_bytes`` (128 MiB) per process before its store read and returned once written
  (or when the request ends, a disconnect included); pieces shrink to 64 KiB once half
  of the budget is in use, and wait only when even that is not free (``budget.py``).
  Pieces are written in 64 KiB copies, so the transport's buffer never pins a whole
  piece, and a client that accepts no write for ``write_timeout`` (60 s) is disconnected
  (``stalls.py``). Peak RSS growth stays under ``buffer_bytes`` + 128 KiB per open
  connection, plus the ``data_cache_bytes`` of kept chunks or files (300 clients that
  never read: +92-131 MiB, against +1625 MiB without the budget).
* ``Range``: one range (``bytes=a-b``, ``a-``, ``-n``) answers ``206`` with
  ``Content-Range``; several answer ``206 multipart/byteranges`` (sorted, overlapping and
  adjacent ones merged); unsatisfiable ones ``416`` with ``Content-Range: bytes */size``;
  a malformed header (or another unit, more than 100 ranges, or a number of more than 19
  digits, which no object can reach) is ignored: ``200``.
  ``Range`` is ignored on ``HEAD``; ``If-Range`` is honoured.
* ``If-Match``, ``If-None-Match``, ``If-Modified-Since``, ``If-Unmodified-Since``:
  ``304``/``412`` per RFC 9110 section 13.2.2; an invalid date is ignored.
* No ``Content-Encoding`` ever: bytes go out exactly as stored (precomputed ``gzip``
  encodings live inside the shards and are decoded by the viewer).
* ``GET /folder/``: an HTML listing (Neuroglancer's format), or JSON with ``?list=json``
  or ``Accept: application/json`` (see ``listing.py``).
* CORS on every answer (errors included, so that viewers can tell 404 from a failure):
  ``Access-Control-Allow-Origin`` per ``allow_origin``, ``Access-Control-Expose-Headers``
  with ``Content-Range, Content-Length, Content-Encoding, ETag``; ``OPTIONS`` preflights
  allow ``Range`` and the conditional headers (and ``Authorization``, ``Content-Type``,
  ``PUT``, ``DELETE`` when writable).
* ``PUT``/``DELETE /key`` only when ``writable`` and with ``Authorization: Bearer
  <token>`` (compared in constant time): otherwise ``405`` (not writable) or ``401``.
  ``If-Match``, ``If-None-Match`` and ``If-Unmodified-Since`` make them conditional
  (``412`` when a precondition fails), atomically: the store writes over, or deletes, only
  the version the preconditions held for, and a concurrent change evaluates them again.
  A store that cannot do that (no ``supports_conditional_deletes``, or no
  ``supports_conditional_writes``) answers a conditional request ``501``.
* Keys come from the raw URL path through the stores' validation (``keys.py``): ``..``,
  ``%2e%2e``, ``%2F``, ``//``, backslashes and NUL answer ``400``, never a file outside
  the root. Backend failures answer ``502``, corrupt shards ``500``; only asyncshard's
  typed errors are mapped. Such answers carry a generic message and a request id (also
  in ``X-Request-Id``), never the store's details (bucket, credentials' source); those
  go to the server's log under that id. A client that disconnects is logged as ``499``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web

from asyncshard.cache import LoadingCache
from asyncshard.server.budget import ByteBudget
from asyncshard.server.config import AppConfig
from asyncshard.server.keys import parse_path
from asyncshard.server.reads import Reader
from asyncshard.server.responses import CommonHeaders, error, failure_response
from asyncshard.server.stalls import StallWatch
from asyncshard.server.writes import Writer, allowed_methods
from asyncshard.store import Store
from asyncshard.views.unsharded import UnshardedView

READ_HEADERS = (
    "Range, If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range, "
    "Cache-Control, Pragma"
)
WRITE_HEADERS = "Authorization, Content-Type"


class LoggedRequest(NamedTuple):
    """One answered request, as recorded in ``make_app``'s ``request_log``."""

    method: str
    path: str
    range: str | None
    status: int


STORE = web.AppKey("asyncshard.store", Store)
BUDGET = web.AppKey("asyncshard.budget", ByteBudget)
STALLS = web.AppKey("asyncshard.stalls", StallWatch)
RespondFn = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
#: The application's one request handler: what a low-level ``aiohttp.web.Server`` runs
#: (``runner.serving``), without the router, middlewares and signals of the application.
RESPOND: web.AppKey[RespondFn] = web.AppKey("asyncshard.respond")


class _Dispatch:
    """The application's one handler: routes each request by method, turns failures
    into answers and adds the headers every answer carries (:class:`CommonHeaders`)."""

    def __init__(
        self,
        reader: Reader,
        writer: Writer,
        config: AppConfig,
        request_log: deque[LoggedRequest] | None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.config = config
        self.request_log = request_log
        self.common = reader.common

    async def respond(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer to ``request`` (aiohttp's request handler)."""
        try:
            response = await self.handle(request)
        except Exception as exc:  # every failure gets an answer, with CORS
            response = failure_response(request, exc)
        if not response.prepared:
            self.common.add_to(request, response)
        log_ = self.request_log
        if log_ is not None:
            log_.append(
                LoggedRequest(
                    request.method, request.raw_path, request.headers.get("Range"), response.status
                )
            )
        return response

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        method = request.method
        if method in ("GET", "HEAD"):
            target = parse_path(request.raw_path)
            if target.is_dir:
                return await self.reader.listing(request, target.key)
            return await self.reader.read(request, target.key)
        if method == "OPTIONS":
            return self.options(request)
        if method in ("PUT", "DELETE"):
            return await self.writer.write(request)
        allow = {"Allow": allowed_methods(self.config)}
        return error(405, f"405 Method Not Allowed: {method}", allow)

    def options(self, request: web.BaseRequest) -> web.StreamResponse:
        """CORS preflight (and plain ``OPTIONS``): what browsers may send."""
        headers = {"Allow": allowed_methods(self.config)}
        if self.config.allowed_origins and "Access-Control-Request-Method" in request.headers:
            allowed = READ_HEADERS + (", " + WRITE_HEADERS if self.config.writable else "")
            headers["Access-Control-Allow-Methods"] = allowed_methods(self.config)
            headers["Access-Control-Allow-Headers"] = allowed
            headers["Access-Control-Max-Age"] = "86400"
            if request.headers.get("Access-Control-Request-Private-Network") == "true":
                # Chrome's Private Network Access: a public viewer page reading a local server
                headers["Access-Control-Allow-Private-Network"] = "true"
        return web.Response(status=204, headers=headers)


def make_app(
    store: Store,
    config: AppConfig | None = None,
    *,
    request_log: deque[LoggedRequest] | None = None,
    close_store: bool = True,
) -> web.Application:
    """The aiohttp application serving ``store`` as ``config`` says (see the module).

    ``request_log`` receives a :class:`LoggedRequest` per answer; ``close_store`` closes
    the store when the application shuts down.
    """
    config = config or AppConfig()
    if config.writable and not store.supports_writes:
        raise ValueError(f"{store!r} does not accept writes")
    served: Store = store
    if config.unshard:
        data_cache = config.data_cache_bytes
        served = UnshardedView(
            store,
            cache=LoadingCache(config.cache_bytes),
            data_cache=LoadingCache(data_cache) if data_cache > 0 else None,
            recheck_after=config.recheck_after,
        )
    budget = ByteBudget(config.buffer_bytes)
    stalls = StallWatch(config.write_timeout)
    reader = Reader(served, config, budget, stalls, CommonHeaders(config))
    dispatch = _Dispatch(reader, Writer(served, config), config, request_log)
    app = web.Application()
    app[STORE] = served
    app[BUDGET] = budget
    app[STALLS] = stalls
    app[RESPOND] = dispatch.respond
    app.cleanup_ctx.append(stalls.sweeping)
    app.router.add_route("*", "/{path:.*}", dispatch.respond)

    if close_store:

        async def close(_app: web.Application) -> None:
            await served.close()

        app.on_cleanup.append(close)
    return app
