"""Answers shared by the server's handlers: error statuses, object headers, aborts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

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
from asyncshard.server.validators import etag_for, http_date
from asyncshard.store import ObjectMeta

log = logging.getLogger("asyncshard.server")

#: The status logged for a request whose client disconnected (nginx's convention).
CLIENT_CLOSED = 499

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Aborted(Exception):
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


def object_headers(key: str, meta: ObjectMeta, cache_control: str | None) -> dict[str, str]:
    """The headers of an object's answer (200, 206, 304 and HEAD)."""
    headers = {"Accept-Ranges": "bytes", "Content-Type": content_type_of(key)}
    etag = etag_for(meta.version)
    if etag is not None:
        headers["ETag"] = etag
    if meta.last_modified is not None:
        headers["Last-Modified"] = http_date(meta.last_modified)
    if cache_control:
        headers["Cache-Control"] = cache_control
    return headers


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=message.rstrip("\n") + "\n", headers=headers)


def error_for(exc: AsyncShardError) -> web.Response:
    if isinstance(exc, InvalidKeyError):
        return error(400, f"400 Bad Request: {exc}")
    if isinstance(exc, ConflictError):
        return error(412, f"412 Precondition Failed: {exc}")
    if isinstance(exc, ReadOnlyError):
        return error(405, f"405 Method Not Allowed: {exc}", {"Allow": "GET, HEAD, OPTIONS"})
    if isinstance(exc, UnsupportedOperationError):
        return error(501, f"501 Not Implemented: {exc}")
    if isinstance(exc, StoreConnectionError | StorePermissionError | StoreBackendError):
        log.warning("backend failure: %s", exc)
        return error(502, f"502 Bad Gateway: the storage backend failed: {exc}")
    if isinstance(exc, FormatError):
        log.error("corrupt data: %s", exc)
        return error(500, f"500 Internal Server Error: stored data is corrupt: {exc}")
    log.exception("unexpected asyncshard error", exc_info=exc)
    return error(500, f"500 Internal Server Error: {exc}")


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn expected failures into plain-text answers (which then get CORS headers)."""
    try:
        return await handler(request)
    except Aborted as aborted:
        if request.transport is not None:
            request.transport.abort()  # not close(): it would wait to flush to a staller
        return aborted.response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.text or exc.reason, exc.headers)
    except AsyncShardError as exc:
        return error_for(exc)
    except ConnectionError:  # the client went away mid-answer: nothing to send or log
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
