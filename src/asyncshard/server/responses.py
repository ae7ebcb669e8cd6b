"""Answers shared by the server's handlers: error statuses, object headers, aborts."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from http import HTTPStatus

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
from asyncshard.server.config import AppConfig
from asyncshard.server.validators import etag_for, http_date
from asyncshard.store import ObjectMeta

log = logging.getLogger("asyncshard.server")

#: What scripts of other origins may read of an answer (``Access-Control-Expose-Headers``).
EXPOSED_HEADERS = (
    "Content-Range, Content-Length, Content-Encoding, ETag, Last-Modified, Accept-Ranges, "
    "X-Request-Id"
)

#: The header (and log field) naming a failed request, to find its details in the log.
REQUEST_ID = "X-Request-Id"

#: The status logged for a request whose client disconnected (nginx's convention).
CLIENT_CLOSED = 499


class Aborted(Exception):
    """A failure after the response headers went out: the connection is dropped, so the
    client sees a body shorter than its ``Content-Length`` (never a mix of versions)."""

    def __init__(self, message: str, response: web.StreamResponse) -> None:
        super().__init__(message)
        self.response = response


class CommonHeaders:
    """The headers every answer carries: CORS per ``allow_origin`` and ``nosniff``."""

    def __init__(self, config: AppConfig) -> None:
        self.origins = config.allowed_origins
        #: The headers, when they do not depend on the request (no origin list).
        self.fixed: dict[str, str] | None = None
        if not self.origins or "*" in self.origins:
            self.fixed = {"X-Content-Type-Options": "nosniff"}
            if self.origins:
                self.fixed["Access-Control-Allow-Origin"] = "*"
                self.fixed["Access-Control-Expose-Headers"] = EXPOSED_HEADERS

    def add_to(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Add the headers to ``response`` (not sent yet) answering ``request``."""
        headers = response.headers
        if self.fixed is not None:
            headers.update(self.fixed)
            return
        origin = request.headers.get("Origin")
        if origin is not None and origin in self.origins:
            headers["Access-Control-Allow-Origin"] = origin
        headers.add("Vary", "Origin")
        headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        headers["X-Content-Type-Options"] = "nosniff"

    async def prepare(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Add the headers and send them: for answers streamed by the handler."""
        self.add_to(request, response)
        await response.prepare(request)


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


def failed(
    request: web.BaseRequest,
    status: int,
    message: str,
    exc: BaseException,
    level: int,
    *,
    trace: bool = False,
) -> web.Response:
    """A generic answer to a failure the client need not know the details of: ``message``
    and a request id (body and ``X-Request-Id``); the details (the exception, which may
    name the bucket and the credentials' source) go to the server's log with that id."""
    request_id = secrets.token_hex(8)
    log.log(
        level,
        "request %s: %s %s: %s: %s",
        request_id,
        request.method,
        request.raw_path,
        type(exc).__name__,
        exc,
        exc_info=exc if trace else None,
    )
    reason = HTTPStatus(status).phrase
    return error(
        status,
        f"{status} {reason}: {message} (request id {request_id})",
        {REQUEST_ID: request_id},
    )


def error_for(request: web.BaseRequest, exc: AsyncShardError) -> web.Response:
    """The answer to one of asyncshard's typed errors (see :func:`failed`)."""
    if isinstance(exc, InvalidKeyError):  # about the client's own path
        return error(400, f"400 Bad Request: {exc}")
    if isinstance(exc, ConflictError):
        return failed(request, 412, "the object changed", exc, logging.INFO)
    if isinstance(exc, ReadOnlyError):
        response = failed(request, 405, "the store is read-only", exc, logging.INFO)
        response.headers["Allow"] = "GET, HEAD, OPTIONS"
        return response
    if isinstance(exc, UnsupportedOperationError):
        return failed(request, 501, "the store cannot do this", exc, logging.INFO)
    if isinstance(exc, StoreConnectionError | StorePermissionError | StoreBackendError):
        return failed(request, 502, "the storage backend failed", exc, logging.WARNING)
    if isinstance(exc, FormatError):
        return failed(request, 500, "stored data is corrupt", exc, logging.ERROR)
    return failed(request, 500, "unexpected failure", exc, logging.ERROR, trace=True)


def failure_response(request: web.BaseRequest, exc: Exception) -> web.StreamResponse:
    """The answer to a handler's failure ``exc``: a plain-text error (which then gets CORS
    headers like any answer), or the response that an abort or a disconnect left."""
    if isinstance(exc, Aborted):
        _drop(request)
        return exc.response
    if isinstance(exc, web.HTTPException):
        return error(exc.status, exc.text or exc.reason, exc.headers)
    if isinstance(exc, AsyncShardError):  # before ConnectionError: a backend's is both
        return error_for(request, exc)
    if isinstance(exc, ConnectionError):  # the client went away mid-answer: nothing to send
        _drop(request)
        return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
    return failed(request, 500, "unexpected failure", exc, logging.ERROR, trace=True)


def _drop(request: web.BaseRequest) -> None:
    """Drop the connection: ``abort()``, since ``close()`` would wait to flush to a client
    that stopped reading."""
    if request.transport is not None:
        request.transport.abort()
