"""Headless Debian ``chromium`` driven through the DevTools protocol (no webdriver).

:func:`chromium_binary` finds the browser or installs it (:mod:`tests.servers.debian`:
only when missing); :class:`Chromium` starts it with software WebGL2 (SwiftShader through
ANGLE) on a private profile and :class:`Page` talks CDP to one tab over an aiohttp
websocket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.servers import debian

CHROMIUM_ENV = "ASYNCSHARD_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--use-gl=angle",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
)


def chromium_binary() -> str:
    """The chromium executable (``$ASYNCSHARD_CHROMIUM`` first); installs Debian's
    ``chromium`` when there is none. ``RuntimeError`` when it cannot be had."""
    explicit = os.environ.get(CHROMIUM_ENV)
    return explicit or debian.ensure("chromium", CHROMIUM_NAMES)


class Chromium:
    """A headless chromium process with a throw-away profile."""

    def __init__(self, binary: str, *, width: int = 1200, height: int = 700) -> None:
        self.binary = binary
        self.size = (width, height)
        self.profile = Path(tempfile.mkdtemp(prefix="asyncshard-chromium-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 30.0) -> Chromium:
        width, height = self.size
        args = [
            self.binary,
            *FLAGS,
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.proc.returncode}")
            with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
                self.port = int(marker.read_text().splitlines()[0])
                return self
            time.sleep(0.05)
        self.stop()
        raise TimeoutError("chromium did not open its DevTools port")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    async def page(self, session: aiohttp.ClientSession) -> Page:
        """A CDP connection to a new tab."""
        url = f"http://127.0.0.1:{self.port}/json/new?about:blank"
        async with session.put(url) as resp:
            target = await resp.json()
        ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(ws, target["id"])
        page.start()
        width, height = self.size
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        return page


class Page:
    """One tab: send CDP commands, collect console output and exceptions."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, target_id: str) -> None:
        self.ws = ws
        self.target_id = target_id
        self.console: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"].get("args", [])
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
                self.console.append(f"console.{data['params'].get('type')}: {text}")
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text")
                self.console.append(f"exception: {text}")
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("DevTools connection closed"))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Run one CDP command; its ``result`` (``RuntimeError`` on a CDP error)."""
        msg_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = future
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        reply = await asyncio.wait_for(future, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """The JSON value of a JavaScript expression (awaited if it is a promise)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        result = await self.send("Runtime.evaluate", params)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def screenshot(self) -> bytes:
        """A PNG of the viewport (``Page.captureScreenshot``)."""
        result = await self.send("Page.captureScreenshot", {"format": "png"})
        return base64.b64decode(result["data"])

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.send("Page.close", timeout=5)
        await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


if __name__ == "__main__":  # pragma: no cover - manual check: python -m tests.http_app.browser
    print(chromium_binary(), file=sys.stderr)
