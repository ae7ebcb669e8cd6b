"""``PUT`` and ``DELETE`` (``writable`` servers, bearer token): conditional ones atomic.

The preconditions (``If-Match``, ``If-None-Match``, ``If-Unmodified-Since``) are
evaluated on the current version, and the store then writes over, or deletes, only that
version; a concurrent change makes the request check again.
"""

from __future__ import annotations

import hmac

from aiohttp import HttpVersion11, web

from asyncshard.server.config import AppConfig
from asyncshard.server.keys import parse_path
from asyncshard.server.responses import error
from asyncshard.server.validators import etag_for, evaluate_preconditions
from asyncshard.store import ObjectMeta, Store, retry_on_conflict

#: The preconditions of a PUT or DELETE (If-Modified-Since applies to GET and HEAD only).
WRITE_CONDITIONS = ("If-Match", "If-None-Match", "If-Unmodified-Since")


def allowed_methods(config: AppConfig) -> str:
    """The ``Allow`` header of the server."""
    return "GET, HEAD, OPTIONS, PUT, DELETE" if config.writable else "GET, HEAD, OPTIONS"


class Writer:
    """The ``PUT``/``DELETE`` handlers of one application."""

    def __init__(self, store: Store, config: AppConfig) -> None:
        self.store = store
        self.config = config

    def _authorized(self, request: web.BaseRequest) -> bool:
        token = self.config.token
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if token is None or scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), token.encode())

    async def write(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self.config.writable:
            return error(
                405,
                "405 Method Not Allowed: this server is read-only",
                {"Allow": allowed_methods(self.config)},
            )
        if not self._authorized(request):
            challenge = 'Bearer realm="asyncshard"'
            if "Authorization" in request.headers:
                challenge += ', error="invalid_token"'
            return error(
                401,
                "401 Unauthorized: a valid bearer token is required",
                {"WWW-Authenticate": challenge},
            )
        target = parse_path(request.raw_path)
        if target.is_dir:
            return error(400, f"400 Bad Request: /{target.key} is a folder, not a key")
        key = target.key
        conditional = any(h in request.headers for h in WRITE_CONDITIONS)
        if request.method == "DELETE":
            if not conditional:
                await self.store.erase_values([key])
                return web.Response(status=204)
            if not self.store.supports_conditional_deletes:
                return error(
                    501,
                    "501 Not Implemented: this store cannot delete "
                    "conditionally (atomically), so conditional DELETEs are refused",
                )
            return await retry_on_conflict(lambda: self._delete_if(request, key), key)
        if conditional and not self.store.supports_conditional_writes:
            return error(
                501,
                "501 Not Implemented: this store cannot write "
                "conditionally (atomically), so conditional PUTs are refused",
            )
        body = await self._read_body(request)
        if body is None:
            limit = self.config.max_upload
            return error(413, f"413 Content Too Large: at most {limit} bytes may be uploaded")
        return await retry_on_conflict(lambda: self._set(request, key, body, conditional), key)

    async def _read_body(self, request: web.BaseRequest) -> bytes | None:
        """The request's body, or ``None`` if it is longer than ``max_upload`` (then not
        read: a declared length says so at once). A client that waits for ``100
        Continue`` gets it now, once the request is known to be acceptable."""
        limit = self.config.max_upload
        declared = request.content_length
        if declared is not None and declared > limit:
            return None
        if (
            request.version >= HttpVersion11
            and request.headers.get("Expect", "").lower() == "100-continue"
            and request.transport is not None
        ):
            request.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        parts = []
        size = 0
        async for part in request.content.iter_any():
            size += len(part)
            if size > limit:
                return None
            parts.append(part)
        return b"".join(parts)

    def _precondition(self, request: web.BaseRequest, current: ObjectMeta | None) -> int | None:
        return evaluate_preconditions(
            request.method,
            request.headers,
            exists=current is not None,
            etag=etag_for(current.version) if current else None,
            last_modified=current.last_modified if current else None,
        )

    async def _delete_if(self, request: web.BaseRequest, key: str) -> web.StreamResponse:
        """A conditional DELETE: the preconditions are checked on the current version, and
        only that version is deleted (a ``ConflictError`` when it changed: checked again)."""
        current = await self.store.head(key)
        if self._precondition(request, current) is not None:
            return error(412, f"412 Precondition Failed: {key}")
        if current is not None:
            if current.version is None:
                return error(501, f"501 Not Implemented: {key} has no version to delete by")
            await self.store.erase_if_match(key, current.version)
        return web.Response(status=204)

    async def _set(
        self, request: web.BaseRequest, key: str, body: bytes, conditional: bool
    ) -> web.StreamResponse:
        """A PUT; when conditional, written only over the version the preconditions held
        for (or only created), so a concurrent change makes it check again."""
        current = await self.store.head(key)
        if self._precondition(request, current) is not None:
            return error(412, f"412 Precondition Failed: {key}")
        if conditional and current is not None and current.version is None:
            return error(501, f"501 Not Implemented: {key} has no version to write over")
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
