"""Run an aiohttp application on 127.0.0.1 in a background thread with its own loop.

Test servers live in threads so that one instance can serve every test of a session,
whatever event loop pytest-asyncio gives each test.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from aiohttp import web

AppFactory = Callable[[], Awaitable[web.Application]]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(
    port: int, timeout: float = 20.0, proc_alive: Callable[[], bool] | None = None
) -> None:
    """Block until something accepts connections on ``127.0.0.1:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_alive is not None and not proc_alive():
            raise RuntimeError(f"server process for port {port} exited before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class ThreadedApp:
    """An aiohttp app served from a daemon thread; ``url`` is set once it listens."""

    def __init__(self, factory: AppFactory, name: str) -> None:
        self._factory = factory
        self.name = name
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"test-server-{name}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadedApp:
        self._thread.start()
        if not self._ready.wait(20):
            raise TimeoutError(f"{self.name} did not start")
        if self._error is not None:
            raise RuntimeError(f"{self.name} failed to start") from self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            app = await self._factory()
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert isinstance(server, asyncio.base_events.Server)
            self.port = server.sockets[0].getsockname()[1]
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def call(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the server's loop (thread-safe) and wait for it."""
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(10)

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)


def process_stopper(
    proc: subprocess.Popen[bytes], log: IO[Any], folder: Path
) -> Callable[[], None]:
    """A function that ends a server process, closes its log and removes its folder."""

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)

    return stop
