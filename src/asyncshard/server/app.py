"""The asyncshard HTTP server: any Store served to web viewers (aiohttp).

:func:`make_app` builds the application; ``asyncshard serve`` (``command.py``) runs it.
What it answers (RFC 9110):

* ``GET``/``HEAD /key``: the object, with an exact ``Content-Length``, ``ETag`` (from the
  store's version), ``Last-Modified`` when known, ``Accept-Ranges: bytes`` and the
  configured ``Cache-Control``; ``404`` when missing. Bodies are streamed through the
  store in ranges of at most ``piece_size`` bytes (4 MiB): a large object is never held
  whole. Later pieces are read conditioned on the first one's version, so an object
  replaced mid-transfer aborts the connection instead of mixing two versions.
* ``Range``: one range (``bytes=a-b``, ``a-``, ``-n``) answers ``206`` with
  ``Content-Range``; several answer ``206 multipart/byteranges`` (sorted, overlapping and
  adjacent ones merged); unsatisfiable ones ``416`` with ``Content-Range: bytes */size``;
  a malformed header (or another unit, more than 100 ranges, or a number of more than 19
  digits, which no object can reach) is ignored: ``200``.
  ``Range`` is ignored on ``HEAD``; ``If-Range`` is honoured.
* ``If-Match``, ``If-None-Match``, ``If-Modified-Since``, ``If-Unmodified-Since``:
  ``304``/``412`` per RFC 9110 section 13.2.2.
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
  ``If-Match``/``If-None-Match: *`` make a ``PUT`` conditional (``412`` when it fails).
* Keys come from the raw URL path through the stores' validation (``keys.py``): ``..``,
  ``%2e%2e``, ``%2F``, ``//``, backslashes and NUL answer ``400``, never a file outside
  the root. Backend failures answer ``502``, corrupt shards ``500``.
"""

from __future__ import annotations

import errno
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
from asyncshard.server.keys import Target, parse_path
from asyncshard.server.listing import listing_html, listing_json, wants_json
from asyncshard.server.ranges import (
    content_range,
    parse_range_header,
    satisfiable_ranges,
    unsatisfied_range,
)
from asyncshard.server.validators import (
    etag_for,
    evaluate_preconditions,
    http_date,
    if_range_holds,
)
from asyncshard.store import GetResult, ObjectMeta, Store
from asyncshard.views.unsharded import UnshardedView

log = logging.getLogger("asyncshard.server")

#: Largest single read the server makes from the store while streaming a body.
PIECE_SIZE = 4 * 1024 * 1024
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


class LoggedRequest(NamedTuple):
    """One answered request, as recorded in :data:`REQUEST_LOG`."""

    method: str
    path: str
    range: str | None
    status: int


STORE = web.AppKey("asyncshard.store", Store)
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
            request.transport.close()
        return aborted.response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.text or exc.reason, exc.headers)
    except AsyncShardError as exc:
        return _error_for(exc)
    except OSError as exc:  # a local backend's file system said no
        if exc.errno == errno.ENAMETOOLONG:
            return _error(404, "404 Not Found: no key with so long a name")
        if isinstance(exc, PermissionError):
            return _error(403, "403 Forbidden: the server may not read this object")
        log.exception("file system error", exc_info=exc)
        return _error(500, f"500 Internal Server Error: {type(exc).__name__}")


class _Server:
    """The request handlers of one application."""

    def __init__(self, store: Store, options: ServerOptions) -> None:
        self.store = store
        self.opts = options

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

    def _first_read(self, ranges: list[ByteRange] | None) -> ByteRange | None:
        """The store range that starts the body and reveals the size, or ``None`` when a
        ``HEAD`` must come first (multiple ranges, a suffix longer than one piece)."""
        piece = self.opts.piece_size
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
        first_range = self._first_read(ranges)
        first: GetResult | None = None
        conditional = any(h in headers for h in _CONDITIONAL)
        if request.method == "HEAD" or first_range is None or conditional:
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
        else:
            first = await self.store.get_object(key, first_range)
            if first is None:
                return _error(404, f"404 Not Found: {key}")
            meta = first.meta
        return await self._body(request, key, meta, ranges, first, first_range)

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
        first: GetResult | None,
        first_range: ByteRange | None,
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
        # The bytes already read: [start, start + len) of the object.
        prefetched: tuple[int, memoryview] | None = None
        if first is not None and first_range is not None:
            if isinstance(first_range, Suffix):
                start = max(size - first_range.length, 0)
            else:
                start = min(first_range.start if isinstance(first_range, Range) else 0, size)
            prefetched = (start, memoryview(first.data))
        if len(spans) == 1:
            start, end = spans[0]
            if status == 206:
                headers["Content-Range"] = content_range(start, end, size)
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = end - start
            await response.prepare(request)
            await self._stream(response, key, meta, start, end, prefetched)
        else:
            response = await self._multipart(request, key, meta, spans, headers)
        await response.write_eof()
        return response

    async def _multipart(
        self,
        request: web.Request,
        key: str,
        meta: ObjectMeta,
        spans: list[tuple[int, int]],
        headers: dict[str, str],
    ) -> web.StreamResponse:
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
        for head, (start, end) in zip(heads, spans, strict=True):
            await response.write(head)
            await self._stream(response, key, meta, start, end, None)
        await response.write(tail)
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        key: str,
        meta: ObjectMeta,
        start: int,
        end: int,
        prefetched: tuple[int, memoryview] | None,
    ) -> None:
        """Write bytes ``[start, end)`` of the object, reading at most a piece at a time."""
        pos = start
        if prefetched is not None:
            at, data = prefetched
            if at <= pos < at + len(data):
                chunk = data[pos - at : min(end, at + len(data)) - at]
                await response.write(chunk)
                pos += len(chunk)
        while pos < end:
            stop = min(end, pos + self.opts.piece_size)
            try:
                result = await self.store.get_object(key, Range(pos, stop), if_match=meta.version)
            except AsyncShardError as exc:
                log.warning("%s changed or failed while being sent: %s", key, exc)
                raise _Aborted(f"{key}: {exc}", response) from exc
            if result is None or len(result.data) != stop - pos:
                log.warning("%s vanished or shrank while being sent", key)
                raise _Aborted(f"{key}: vanished or shrank while being sent", response)
            await response.write(result.data)
            pos = stop

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
        current = await self.store.head(key)
        status = evaluate_preconditions(
            request.method,
            request.headers,
            exists=current is not None,
            etag=etag_for(current.version) if current else None,
            last_modified=current.last_modified if current else None,
        )
        if status is not None:
            return _error(412, f"412 Precondition Failed: {key}")
        if request.method == "DELETE":
            await self.store.erase_values([key])
            return web.Response(status=204)
        body = await request.read()
        conditional = "If-Match" in request.headers or "If-None-Match" in request.headers
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
    writable: bool = False,
    token: str | None = None,
    piece_size: int = PIECE_SIZE,
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
        writable, token: accept ``PUT``/``DELETE`` with ``Authorization: Bearer <token>``.
        piece_size: largest single store read while streaming a body.
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
    if piece_size <= 0:
        raise ValueError("piece_size must be positive")
    served: Store = UnshardedView(store, cache=IndexCache(cache_bytes)) if unshard else store
    options = ServerOptions(allow_origin, cache_control, writable, token, piece_size)
    server = _Server(served, options)
    app = web.Application(middlewares=[_errors], client_max_size=max_upload)
    app[STORE] = served
    if request_log is not None:
        app[REQUEST_LOG] = request_log
    app.on_response_prepare.append(server.on_prepare)
    app.router.add_route("*", "/{path:.*}", server.handle)

    if close_store:

        async def close(_app: web.Application) -> None:
            await served.close()

        app.on_cleanup.append(close)
    return app
