"""The asyncshard HTTP server: any Store served to web viewers (aiohttp).

:func:`make_app` builds the application; ``asyncshard serve`` (``command.py``) runs it.
What it answers (RFC 9110):

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
  connection (300 clients that never read: +92-131 MiB, against +1625 MiB without the
  budget; see docs/ARCHITECTURE.md).
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
  typed errors are mapped. A client that disconnects is logged as ``499``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from aiohttp import web

from asyncshard.cache import DEFAULT_CACHE_BYTES, IndexCache
from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    FormatError,
    InvalidKeyError,
    ReadOnlyError,
    StoreBackendError,
    StoreConnectionError,
    StorePermissionError,
    UnsupportedOperationError,
)
from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from asyncshard.server.budget import ByteBudget, Reservation
from asyncshard.server.keys import Target, parse_path
from asyncshard.server.listing import listing_html, listing_json, wants_json
from asyncshard.server.ranges import (
    content_range,
    parse_range_header,
    satisfiable_ranges,
    unsatisfied_range,
)
from asyncshard.server.stalls import StallWatch
from asyncshard.server.validators import (
    etag_for,
    evaluate_preconditions,
    http_date,
    if_range_holds,
)
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER
from asyncshard.store import Data, ObjectMeta, Store, retry_on_conflict
from asyncshard.views.unsharded import UnshardedView

log = logging.getLogger("asyncshard.server")

#: Largest single read the server makes from the store while streaming a body.
PIECE_SIZE = 4 * 1024 * 1024
#: Default budget of body bytes held by all requests at once (see ``budget.py``).
DEFAULT_BUFFER_BYTES = 128 * 1024 * 1024
#: Bytes handed to the socket per write (each a copy, so that nothing the transport
#: still buffers keeps a whole piece alive).
WRITE_SLICE = 64 * 1024
#: A client that accepts no write slice for this many seconds is disconnected.
DEFAULT_WRITE_TIMEOUT = 60.0
#: The status logged for a request whose client disconnected (nginx's convention).
CLIENT_CLOSED = 499
#: Chunk-data cache of ``--unshard`` (per server process).
DEFAULT_DATA_CACHE_BYTES = 64 * 1024 * 1024
#: Largest accepted PUT body.
MAX_UPLOAD = 1024 * 1024 * 1024
#: Default ``Cache-Control`` of objects: caches may keep them but must revalidate (cheap,
#: thanks to ETags). Immutable datasets can use ``"public, max-age=86400, immutable"``.
DEFAULT_CACHE_CONTROL = "no-cache"
EXPOSED_HEADERS = (
    "Content-Range, Content-Length, Content-Encoding, ETag, Last-Modified, Accept-Ranges"
)
READ_HEADERS = (
    "Range, If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range, "
    "Cache-Control, Pragma"
)
WRITE_HEADERS = "Authorization, Content-Type"
_CONDITIONAL = ("If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range")
#: The preconditions of a PUT or DELETE (If-Modified-Since applies to GET and HEAD only).
_WRITE_CONDITIONS = ("If-Match", "If-None-Match", "If-Unmodified-Since")


class LoggedRequest(NamedTuple):
    """One answered request, as recorded in :data:`REQUEST_LOG`."""

    method: str
    path: str
    range: str | None
    status: int


STORE = web.AppKey("asyncshard.store", Store)
BUDGET = web.AppKey("asyncshard.budget", ByteBudget)
STALLS = web.AppKey("asyncshard.stalls", StallWatch)
REQUEST_LOG = web.AppKey("asyncshard.request_log", deque[LoggedRequest])


@dataclass(frozen=True)
class ServerOptions:
    """How the server answers; see :func:`make_app`."""

    allow_origin: str = "*"
    cache_control: str | None = DEFAULT_CACHE_CONTROL
    writable: bool = False
    token: str | None = None
    piece_size: int = PIECE_SIZE

    @property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(o.strip() for o in self.allow_origin.split(",") if o.strip())


class _Aborted(Exception):
    """A failure after the response headers went out: the connection is dropped, so the
    client sees a body shorter than its ``Content-Length`` (never a mix of versions)."""

    def __init__(self, message: str, response: web.StreamResponse) -> None:
        super().__init__(message)
        self.response = response


def content_type_of(key: str) -> str:
    """``application/json`` for ``.json`` keys, else ``application/octet-stream``.

    Nothing is served as HTML or script: a writable server must not host pages.
    """
    return "application/json" if key.endswith(".json") else "application/octet-stream"


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=message.rstrip("\n") + "\n", headers=headers)


def _error_for(exc: AsyncShardError) -> web.Response:
    if isinstance(exc, InvalidKeyError):
        return _error(400, f"400 Bad Request: {exc}")
    if isinstance(exc, ConflictError):
        return _error(412, f"412 Precondition Failed: {exc}")
    if isinstance(exc, ReadOnlyError):
        return _error(405, f"405 Method Not Allowed: {exc}", {"Allow": "GET, HEAD, OPTIONS"})
    if isinstance(exc, UnsupportedOperationError):
        return _error(501, f"501 Not Implemented: {exc}")
    if isinstance(exc, StoreConnectionError | StorePermissionError | StoreBackendError):
        log.warning("backend failure: %s", exc)
        return _error(502, f"502 Bad Gateway: the storage backend failed: {exc}")
    if isinstance(exc, FormatError):
        log.error("corrupt data: %s", exc)
        return _error(500, f"500 Internal Server Error: stored data is corrupt: {exc}")
    log.exception("unexpected asyncshard error", exc_info=exc)
    return _error(500, f"500 Internal Server Error: {exc}")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn expected failures into plain-text answers (which then get CORS headers)."""
    try:
        return await handler(request)
    except _Aborted as aborted:
        if request.transport is not None:
            request.transport.abort()  # not close(): it would wait to flush to a staller
        return aborted.response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.text or exc.reason, exc.headers)
    except AsyncShardError as exc:
        return _error_for(exc)
    except ConnectionError:  # the client went away mid-answer: nothing to send or log
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")


@dataclass
class _Out:
    """Where a body goes: its response, written under the stall watch."""

    response: web.StreamResponse
    transport: asyncio.Transport | None
    stalls: StallWatch

    async def write(self, data: Data | None) -> None:
        """Write ``data`` (``None``: end the body); a client that accepts nothing for the
        write timeout is disconnected (it would otherwise hold its piece forever)."""
        if self.transport is None:  # the client is gone: aiohttp raises the right error
            await self._write(data)
            return
        token = self.stalls.begin(self.transport)
        try:
            await self._write(data)
        finally:
            self.stalls.end(token)

    async def _write(self, data: Data | None) -> None:
        if data is None:
            await self.response.write_eof()
        else:
            await self.response.write(data)

    async def send(self, data: Data) -> None:
        """Write ``data`` in slices of :data:`WRITE_SLICE` bytes, each a copy (a slice of
        the piece would keep all of it alive for as long as the transport buffers it)."""
        view = memoryview(data)
        if len(view) <= WRITE_SLICE:
            await self.write(view)
            return
        for i in range(0, len(view), WRITE_SLICE):
            await self.write(bytes(view[i : i + WRITE_SLICE]))


@dataclass
class _Piece:
    """Bytes of the object from offset ``at``, read ahead, and their share of the budget.

    ``data`` is cleared once written, so that the bytes are freed with their reservation.
    """

    at: int
    data: memoryview | None
    reservation: Reservation


class _Server:
    """The request handlers of one application."""

    def __init__(
        self, store: Store, options: ServerOptions, budget: ByteBudget, stalls: StallWatch
    ) -> None:
        self.store = store
        self.opts = options
        self.budget = budget
        self.stalls = stalls

    # -- common headers -------------------------------------------------------------------

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Add CORS headers to every answer and record it."""
        origins = self.opts.allowed_origins
        if origins:
            origin = request.headers.get("Origin")
            if "*" in origins:
                response.headers["Access-Control-Allow-Origin"] = "*"
            elif origin is not None and origin in origins:
                response.headers["Access-Control-Allow-Origin"] = origin
            if "*" not in origins:
                response.headers.add("Vary", "Origin")
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        log_ = request.app.get(REQUEST_LOG)
        if log_ is not None:
            log_.append(
                LoggedRequest(
                    request.method, request.raw_path, request.headers.get("Range"), response.status
                )
            )

    def _object_headers(self, key: str, meta: ObjectMeta) -> dict[str, str]:
        headers = {"Accept-Ranges": "bytes", "Content-Type": content_type_of(key)}
        etag = etag_for(meta.version)
        if etag is not None:
            headers["ETag"] = etag
        if meta.last_modified is not None:
            headers["Last-Modified"] = http_date(meta.last_modified)
        if self.opts.cache_control:
            headers["Cache-Control"] = self.opts.cache_control
        return headers

    # -- dispatch -------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        if method in ("GET", "HEAD"):
            target = parse_path(request.raw_path)
            if target.is_dir:
                return await self.listing(request, target)
            return await self.read(request, target.key)
        if method == "OPTIONS":
            return self.options(request)
        if method in ("PUT", "DELETE"):
            return await self.write(request)
        return _error(405, f"405 Method Not Allowed: {method}", {"Allow": self._allow()})

    def _allow(self) -> str:
        return "GET, HEAD, OPTIONS, PUT, DELETE" if self.opts.writable else "GET, HEAD, OPTIONS"

    def options(self, request: web.Request) -> web.StreamResponse:
        """CORS preflight (and plain ``OPTIONS``): what browsers may send."""
        headers = {"Allow": self._allow()}
        if self.opts.allowed_origins and "Access-Control-Request-Method" in request.headers:
            allowed = READ_HEADERS + (", " + WRITE_HEADERS if self.opts.writable else "")
            headers["Access-Control-Allow-Methods"] = self._allow()
            headers["Access-Control-Allow-Headers"] = allowed
            headers["Access-Control-Max-Age"] = "86400"
            if request.headers.get("Access-Control-Request-Private-Network") == "true":
                # Chrome's Private Network Access: a public viewer page reading a local server
                headers["Access-Control-Allow-Private-Network"] = "true"
        return web.Response(status=204, headers=headers)

    # -- listings -------------------------------------------------------------------------

    async def listing(self, request: web.Request, target: Target) -> web.StreamResponse:
        prefix = target.key
        if not self.store.supports_listing:
            return _error(404, f"404 Not Found: {self.store!r} cannot list folders")
        keys, prefixes = await self.store.list_dir(prefix)
        if prefix and not keys and not prefixes and not await self._virtual_folder(prefix):
            return _error(404, f"404 Not Found: no folder /{prefix}")
        headers = {"Cache-Control": "no-cache"}
        if wants_json(request.query, request.headers.get("Accept")):
            return web.json_response(listing_json(prefix, keys, prefixes), headers=headers)
        return web.Response(
            text=listing_html(prefix, keys, prefixes), content_type="text/html", headers=headers
        )

    async def _virtual_folder(self, prefix: str) -> bool:
        """Whether an empty-looking folder exists all the same: a folder of the unsharded
        view whose only files are hidden (a sharded scale lists no chunk names)."""
        return await self.store.has_folder(prefix)

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _first_read(ranges: list[ByteRange] | None, piece: int) -> Range | Suffix | None:
        """The store range of at most ``piece`` bytes that starts the body and reveals the
        size, or ``None`` when a ``HEAD`` must come first (multiple ranges, a suffix longer
        than ``piece``)."""
        if ranges is None:
            return Range(0, piece)
        if len(ranges) != 1:
            return None
        (rng,) = ranges
        if isinstance(rng, Range):
            return Range(rng.start, min(rng.end, rng.start + piece))
        if isinstance(rng, Offset):
            return Range(rng.offset, rng.offset + piece)
        return rng if rng.length <= piece else None

    async def read(self, request: web.Request, key: str) -> web.StreamResponse:
        headers = request.headers
        ranges = None if request.method == "HEAD" else parse_range_header(headers.get("Range"))
        conditional = any(h in headers for h in _CONDITIONAL)
        if request.method != "HEAD" and not conditional:
            wanted = self._first_read(ranges, self.opts.piece_size)
            if wanted is not None:
                want = wanted.length if isinstance(wanted, Suffix) else wanted.end - wanted.start
                async with self.budget.reserve(max(want, 1)) as reservation:
                    first_range = self._first_read(ranges, reservation.size)
                    if first_range is not None:  # else a suffix longer than the budget allows
                        return await self._read_ahead(
                            request, key, ranges, first_range, reservation
                        )
        meta = await self.store.head(key)
        if meta is None:
            return _error(404, f"404 Not Found: {key}")
        etag = etag_for(meta.version)
        status = evaluate_preconditions(
            request.method, headers, exists=True, etag=etag, last_modified=meta.last_modified
        )
        if status == 304:
            not_modified = self._object_headers(key, meta)
            del not_modified["Content-Type"], not_modified["Accept-Ranges"]
            return web.Response(status=304, headers=not_modified)
        if status is not None:
            return _error(status, f"{status} Precondition Failed: {key}")
        if ranges is not None and not if_range_holds(
            headers.get("If-Range"), etag, meta.last_modified
        ):
            ranges = None
        if request.method == "HEAD":
            return await self._head_response(request, key, meta)
        return await self._body(request, key, meta, ranges, None)

    async def _read_ahead(
        self,
        request: web.Request,
        key: str,
        ranges: list[ByteRange] | None,
        first_range: Range | Suffix,
        reservation: Reservation,
    ) -> web.StreamResponse:
        """Answer with one store read first: it gives the size and starts the body."""
        first = await self.store.get_object(key, first_range)
        if first is None:
            return _error(404, f"404 Not Found: {key}")
        reservation.keep(len(first.data))
        meta = first.meta
        if isinstance(first_range, Suffix):
            at = max(meta.size - first_range.length, 0)
        else:
            at = min(first_range.start, meta.size)
        piece = _Piece(at, memoryview(first.data), reservation)
        del first  # the piece holds the only reference: freed once written
        return await self._body(request, key, meta, ranges, piece)

    async def _head_response(
        self, request: web.Request, key: str, meta: ObjectMeta
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=self._object_headers(key, meta))
        response.content_length = meta.size
        await response.prepare(request)
        await response.write_eof()
        return response

    async def _body(
        self,
        request: web.Request,
        key: str,
        meta: ObjectMeta,
        ranges: list[ByteRange] | None,
        piece: _Piece | None,
    ) -> web.StreamResponse:
        size = meta.size
        headers = self._object_headers(key, meta)
        if ranges is None:
            spans = [(0, size)]
            status = 200
        else:
            spans = satisfiable_ranges(ranges, size)
            if not spans:
                headers["Content-Range"] = unsatisfied_range(size)
                del headers["Content-Type"]
                return _error(416, f"416 Range Not Satisfiable: {key} has {size} bytes", headers)
            status = 206
        if len(spans) == 1:
            start, end = spans[0]
            if status == 206:
                headers["Content-Range"] = content_range(start, end, size)
            whole = self._whole_body(piece, start, end)
            if whole is not None:  # small and read already: headers and body in one write
                return web.Response(status=status, headers=headers, body=whole)
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = end - start
            await response.prepare(request)
            out = self._out(request, response)
            await self._stream(out, key, meta, start, end, piece)
        else:
            out = await self._multipart(request, key, meta, spans, headers)
        await out.write(None)
        return out.response

    @staticmethod
    def _whole_body(piece: _Piece | None, start: int, end: int) -> memoryview | None:
        """The body ``[start, end)`` when the read-ahead piece holds all of it and it is
        no larger than :data:`WRITE_SLICE` (what a stalled client may keep buffered); the
        piece's reservation is released then (the transport owns the bytes)."""
        if piece is None or piece.data is None or end - start > WRITE_SLICE:
            return None
        if not piece.at <= start <= end <= piece.at + len(piece.data):
            return None
        body = piece.data[start - piece.at : end - piece.at]
        piece.data = None
        piece.reservation.release()
        return body

    def _out(self, request: web.Request, response: web.StreamResponse) -> _Out:
        return _Out(response, request.transport, self.stalls)

    async def _multipart(
        self,
        request: web.Request,
        key: str,
        meta: ObjectMeta,
        spans: list[tuple[int, int]],
        headers: dict[str, str],
    ) -> _Out:
        boundary = secrets.token_hex(16)
        part_type = headers.pop("Content-Type")
        heads = [
            (
                ("\r\n" if i else "")
                + f"--{boundary}\r\nContent-Type: {part_type}\r\n"
                + f"Content-Range: {content_range(s, e, meta.size)}\r\n\r\n"
            ).encode()
            for i, (s, e) in enumerate(spans)
        ]
        tail = f"\r\n--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/byteranges; boundary={boundary}"
        response = web.StreamResponse(status=206, headers=headers)
        response.content_length = sum(map(len, heads)) + sum(e - s for s, e in spans) + len(tail)
        await response.prepare(request)
        out = self._out(request, response)
        for head, (start, end) in zip(heads, spans, strict=True):
            await out.write(head)
            await self._stream(out, key, meta, start, end, None)
        await out.write(tail)
        return out

    async def _stream(
        self,
        out: _Out,
        key: str,
        meta: ObjectMeta,
        start: int,
        end: int,
        piece: _Piece | None,
    ) -> None:
        """Write bytes ``[start, end)`` of the object, a budgeted piece at a time."""
        pos = start
        if piece is not None and piece.data is not None:
            data, piece.data = piece.data, None
            if piece.at <= pos < piece.at + len(data):
                stop = min(end, piece.at + len(data))
                await out.send(data[pos - piece.at : stop - piece.at])
                pos = stop
            del data
            piece.reservation.release()
        while pos < end:
            async with self.budget.reserve(min(end - pos, self.opts.piece_size)) as reservation:
                stop = pos + reservation.size
                await self._send_piece(out, key, meta, pos, stop)
            pos = stop

    async def _send_piece(
        self, out: _Out, key: str, meta: ObjectMeta, start: int, stop: int
    ) -> None:
        """Read bytes ``[start, stop)`` at the body's version and write them."""
        try:
            result = await self.store.get_object(key, Range(start, stop), if_match=meta.version)
        except AsyncShardError as exc:
            log.warning("%s changed or failed while being sent: %s", key, exc)
            raise _Aborted(f"{key}: {exc}", out.response) from exc
        if result is None or len(result.data) != stop - start:
            log.warning("%s vanished or shrank while being sent", key)
            raise _Aborted(f"{key}: vanished or shrank while being sent", out.response)
        await out.send(result.data)

    # -- writes ---------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        token = self.opts.token
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if token is None or scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), token.encode())

    async def write(self, request: web.Request) -> web.StreamResponse:
        if not self.opts.writable:
            return _error(
                405, "405 Method Not Allowed: this server is read-only", {"Allow": self._allow()}
            )
        if not self._authorized(request):
            challenge = 'Bearer realm="asyncshard"'
            if "Authorization" in request.headers:
                challenge += ', error="invalid_token"'
            return _error(
                401,
                "401 Unauthorized: a valid bearer token is required",
                {"WWW-Authenticate": challenge},
            )
        target = parse_path(request.raw_path)
        if target.is_dir:
            return _error(400, f"400 Bad Request: /{target.key} is a folder, not a key")
        key = target.key
        conditional = any(h in request.headers for h in _WRITE_CONDITIONS)
        if request.method == "DELETE":
            if not conditional:
                await self.store.erase_values([key])
                return web.Response(status=204)
            if not self.store.supports_conditional_deletes:
                return _error(
                    501,
                    f"501 Not Implemented: {self.store!r} cannot delete "
                    "conditionally (atomically), so conditional DELETEs are refused",
                )
            return await retry_on_conflict(lambda: self._delete_if(request, key), key)
        if conditional and not self.store.supports_conditional_writes:
            return _error(
                501,
                f"501 Not Implemented: {self.store!r} cannot write "
                "conditionally (atomically), so conditional PUTs are refused",
            )
        body = await request.read()
        return await retry_on_conflict(lambda: self._put(request, key, body, conditional), key)

    def _precondition(self, request: web.Request, current: ObjectMeta | None) -> int | None:
        return evaluate_preconditions(
            request.method,
            request.headers,
            exists=current is not None,
            etag=etag_for(current.version) if current else None,
            last_modified=current.last_modified if current else None,
        )

    async def _delete_if(self, request: web.Request, key: str) -> web.StreamResponse:
        """A conditional DELETE: the preconditions are checked on the current version, and
        only that version is deleted (a ``ConflictError`` when it changed: checked again)."""
        current = await self.store.head(key)
        if self._precondition(request, current) is not None:
            return _error(412, f"412 Precondition Failed: {key}")
        if current is not None:
            if current.version is None:
                return _error(501, f"501 Not Implemented: {key} has no version to delete by")
            await self.store.erase_if_match(key, current.version)
        return web.Response(status=204)

    async def _put(
        self, request: web.Request, key: str, body: bytes, conditional: bool
    ) -> web.StreamResponse:
        """A PUT; when conditional, written only over the version the preconditions held
        for (or only created), so a concurrent change makes it check again."""
        current = await self.store.head(key)
        if self._precondition(request, current) is not None:
            return _error(412, f"412 Precondition Failed: {key}")
        if conditional and current is not None and current.version is None:
            return _error(501, f"501 Not Implemented: {key} has no version to write over")
        version = await self.store.set(
            key,
            body,
            if_match=current.version if conditional and current is not None else None,
            if_absent=conditional and current is None,
        )
        headers = {}
        etag = etag_for(version)
        if etag is not None:
            headers["ETag"] = etag
        return web.Response(status=204 if current is not None else 201, headers=headers)


def make_app(
    store: Store,
    *,
    allow_origin: str = "*",
    cache_control: str | None = DEFAULT_CACHE_CONTROL,
    unshard: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    data_cache_bytes: int = DEFAULT_DATA_CACHE_BYTES,
    recheck_after: float = DEFAULT_RECHECK_AFTER,
    writable: bool = False,
    token: str | None = None,
    piece_size: int = PIECE_SIZE,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    write_timeout: float = DEFAULT_WRITE_TIMEOUT,
    max_upload: int = MAX_UPLOAD,
    request_log: deque[LoggedRequest] | None = None,
    close_store: bool = True,
) -> web.Application:
    """The aiohttp application serving ``store`` (see the module docstring).

    Args:
        store: any Store.
        allow_origin: ``Access-Control-Allow-Origin``: ``*``, one origin or a
            comma-separated list (the request's ``Origin`` is echoed when listed);
            ``""`` sends no CORS headers.
        cache_control: ``Cache-Control`` of objects (``None``: none sent).
        unshard: serve sharded Zarr arrays and precomputed volumes as unsharded
            (:class:`~asyncshard.views.unsharded.UnshardedView`); read-only.
        cache_bytes: the shard-index cache of the unsharded view.
        data_cache_bytes: the unsharded view's chunk-data cache (``0``: none): viewers
            re-read chunks, and a streamed encoded chunk is decoded once, not per piece.
        recheck_after: seconds a cached index may answer "no such chunk" (404) before
            the shard is checked again (see ``ShardedAdapter``).
        writable, token: accept ``PUT``/``DELETE`` with ``Authorization: Bearer <token>``.
        piece_size: largest single store read while streaming a body.
        buffer_bytes: budget of body bytes held by all requests at once (pieces shrink
            to 64 KiB when it runs low; see the module docstring).
        write_timeout: seconds a client may accept no data before it is disconnected.
        max_upload: largest ``PUT`` body (larger ones answer 413).
        request_log: a deque that receives a :class:`LoggedRequest` per answer.
        close_store: close the store when the application shuts down.
    """
    if writable and not token:
        raise ValueError("a writable server needs a token")
    if writable and unshard:
        raise ValueError("the unsharded view is read-only: writable and unshard exclude each other")
    if writable and not store.supports_writes:
        raise ValueError(f"{store!r} does not accept writes")
    if piece_size <= 0 or buffer_bytes <= 0 or write_timeout <= 0:
        raise ValueError("piece_size, buffer_bytes and write_timeout must be positive")
    served: Store = store
    if unshard:
        served = UnshardedView(
            store,
            cache=IndexCache(cache_bytes),
            data_cache=IndexCache(data_cache_bytes) if data_cache_bytes > 0 else None,
            recheck_after=recheck_after,
        )
    options = ServerOptions(allow_origin, cache_control, writable, token, piece_size)
    budget = ByteBudget(buffer_bytes)
    stalls = StallWatch(write_timeout)
    server = _Server(served, options, budget, stalls)
    app = web.Application(middlewares=[_errors], client_max_size=max_upload)
    app[STORE] = served
    app[BUDGET] = budget
    app[STALLS] = stalls
    app.cleanup_ctx.append(stalls.sweeping)
    if request_log is not None:
        app[REQUEST_LOG] = request_log
    app.on_response_prepare.append(server.on_prepare)
    app.router.add_route("*", "/{path:.*}", server.handle)

    if close_store:

        async def close(_app: web.Application) -> None:
            await served.close()

        app.on_cleanup.append(close)
    return app
