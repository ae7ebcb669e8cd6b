"""Running the server of ``asyncshard serve`` in one process (each worker runs one).

:class:`ServeConfig` is everything a server process needs, plain and picklable, so that
``--workers`` can hand it to spawned processes: what to serve and where, and the
:class:`~.config.AppConfig` of the application; :func:`serve_config` opens the store,
builds the application and serves it until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from asyncshard.backends.registry import open_store
from asyncshard.errors import (
    AsyncShardError,
    StoreAuthenticationError,
    StoreConnectionError,
    StorePermissionError,
    UnsupportedOperationError,
)
from asyncshard.server.app import RESPOND, make_app
from asyncshard.server.config import AppConfig
from asyncshard.store import Store

#: Access log: client, request line, status, bytes sent and the Range asked for.
ACCESS_LOG_FORMAT = '%a "%r" %s %b range=%{Range}i'
#: With several workers, each line also names the worker process that answered.
WORKER_ACCESS_LOG_FORMAT = ACCESS_LOG_FORMAT + " pid=%P"
#: Seconds requests in flight get to finish after SIGINT/SIGTERM (aiohttp's default is
#: 60 s, long to wait when a client stopped reading). aiohttp waits that long, then
#: cancels the request and waits as long again before it cancels the handler: a server
#: with clients that stopped reading stops within about twice this.
SHUTDOWN_TIMEOUT = 5.0

log = logging.getLogger("asyncshard.server")


class CannotServe(AsyncShardError):
    """``asyncshard serve`` cannot serve its store: reading the root failed (credentials
    refused, no such bucket, an unreachable endpoint)."""


class NothingToServe(CannotServe):
    """A read-only server over a store that lists no keys at all (a mistyped path)."""


@dataclass(frozen=True)
class ServeConfig:
    """What one server process serves, and how (the options of ``asyncshard serve``)."""

    url: str
    app: AppConfig = field(default_factory=AppConfig)
    host: str = "127.0.0.1"
    port: int = 0
    quiet: bool = False
    workers: int = 1
    storage_options: dict[str, Any] = field(default_factory=dict)


def configure_logging(quiet: bool) -> None:
    """The access log on stderr, unless ``quiet``."""
    if not quiet:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("aiohttp.access").setLevel(logging.INFO)


async def check_servable(store: Store, url: str, *, writable: bool = False) -> None:
    """Read the root of ``store`` once, as the server will, before serving it.

    :class:`CannotServe` when that fails: credentials refused, no such bucket, an
    unreachable endpoint or another failure of the backend; and, unless ``writable``,
    :class:`NothingToServe` when the root lists nothing (a mistyped folder or prefix;
    a missing folder and an empty one look the same through the Store contract).
    Stores that cannot list (plain HTTP) are served as they are, and so are those whose
    listing alone is denied to credentials the backend accepts (objects may be readable).
    """
    if not store.supports_listing:
        return
    try:
        keys, prefixes = await store.list_dir("")
    except UnsupportedOperationError:
        return
    except StoreAuthenticationError as exc:
        raise CannotServe(f"cannot serve {url}: the credentials were refused: {exc}") from exc
    except StorePermissionError as exc:
        log.warning("listing %s is denied; serving it unchecked: %s", url, exc)
        return
    except StoreConnectionError as exc:
        raise CannotServe(f"cannot serve {url}: the storage is unreachable: {exc}") from exc
    except AsyncShardError as exc:
        raise CannotServe(f"cannot serve {url}: {type(exc).__name__}: {exc}") from exc
    if not writable and not keys and not prefixes:
        raise NothingToServe(
            f"nothing to serve at {url}: no such folder, or an empty one "
            "(--writable serves it all the same)"
        )


@contextlib.asynccontextmanager
async def serving(
    app: web.Application,
    host: str,
    port: int,
    *,
    access_log: bool = False,
    access_log_format: str = ACCESS_LOG_FORMAT,
    reuse_port: bool = False,
) -> AsyncIterator[int]:
    """Serve ``app`` (from :func:`~.app.make_app`) on ``host:port``; yields the port bound.

    Requests go straight to the application's one handler through aiohttp's low-level
    server (no router, middlewares or signals, which cost about 30 µs per small answer
    on the benchmark machine); the application's start-up and clean-up run around it.
    ``reuse_port`` binds with ``SO_REUSEPORT``, so that several processes share the port
    (the kernel spreads the connections over them).
    """
    app.freeze()
    try:
        await app.startup()
        server = web.Server(
            app[RESPOND],
            handler_cancellation=True,
            access_log=logging.getLogger("aiohttp.access") if access_log else None,
            access_log_format=access_log_format,
        )
        runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
            await site.start()
            yield runner.addresses[0][1] if runner.addresses else port
        finally:
            await runner.cleanup()
    finally:
        await app.shutdown()
        await app.cleanup()


async def run_app(
    app: web.Application,
    host: str,
    port: int,
    *,
    ready: Callable[[int], None] | None = None,
    access_log: bool = True,
    access_log_format: str = ACCESS_LOG_FORMAT,
    reuse_port: bool = False,
) -> None:
    """:func:`serving` until SIGINT/SIGTERM; ``ready(port)`` once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with serving(
        app,
        host,
        port,
        access_log=access_log,
        access_log_format=access_log_format,
        reuse_port=reuse_port,
    ) as bound:
        if ready is not None:
            ready(bound)
        await stop.wait()


async def serve_config(
    config: ServeConfig,
    *,
    ready: Callable[[int], None] | None = None,
    check: bool = True,
    reuse_port: bool = False,
) -> None:
    """Open the store of ``config`` and serve it until SIGINT/SIGTERM (see :func:`run_app`).

    ``check``: first read the store's root (:func:`check_servable`).
    """
    store = open_store(config.url, config.storage_options)
    try:
        if check:
            await check_servable(store, config.url, writable=config.app.writable)
        app = make_app(store, config.app)
    except BaseException:
        await store.close()
        raise
    await run_app(
        app,
        config.host,
        config.port,
        ready=ready,
        access_log=not config.quiet,
        access_log_format=WORKER_ACCESS_LOG_FORMAT if config.workers > 1 else ACCESS_LOG_FORMAT,
        reuse_port=reuse_port,
    )


async def check_url(config: ServeConfig) -> None:
    """:func:`check_servable` on the store of ``config`` (opened and closed again)."""
    async with open_store(config.url, config.storage_options) as store:
        await check_servable(store, config.url, writable=config.app.writable)
