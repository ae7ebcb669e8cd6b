"""A static file server (aiohttp) with ``Range``, ``HEAD``, ``ETag`` and ``If-Match``.

It serves a folder read-only, like nginx or any CDN in front of a bucket would, and logs
each request's method, path and ``Range`` header for server-side request accounting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from tests.servers._threaded import ThreadedApp

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class StaticServer:
    """Serves ``root`` on 127.0.0.1; :meth:`start` it, then use :attr:`url`."""

    root: Path
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    _server: ThreadedApp | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        return self._server.url

    def start(self) -> StaticServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self._server = ThreadedApp(self._app, "http-static").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _app(self) -> web.Application:
        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.log.append((request.method, request.path, request.headers.get("Range")))
            return await handler(request)

        app = web.Application(middlewares=[record])
        app.router.add_static("/", self.root, show_index=False, follow_symlinks=False)
        return app
