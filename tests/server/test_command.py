"""``asyncshard serve``: the click command, run for real in a subprocess."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote

import aiohttp
import pytest
from click.testing import CliRunner

from asyncshard.server.command import parse_size, serve
from asyncshard.server.demo import PRECOMPUTED_PATH, ZARR_PATH

SERVE = [sys.executable, "-c", "from asyncshard.server.command import main; main()"]


class Running:
    """``asyncshard serve ...`` in a subprocess; the lines it printed."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        self.stop()
        raise AssertionError(f"{pattern!r} not printed: {self.lines} {self.stderr()}")

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)


async def test_serve_demo_prints_a_working_neuroglancer_link(tmp_path: Path) -> None:
    server = Running("--demo", str(tmp_path / "demo"))
    try:
        base = server.wait_for(r"Serving .* at (http://127\.0\.0\.1:\d+)/").group(1)
        link = server.wait_for(r"^(https://\S+)").group(1)
        assert link.startswith("https://neuroglancer-demo.appspot.com/#!")
        state = json.loads(unquote(link.split("#!", 1)[1]))
        sources = [layer["source"] for layer in state["layers"]]
        assert sources == [
            f"zarr3://{base}/{ZARR_PATH}/",
            f"precomputed://{base}/{PRECOMPUTED_PATH}",
        ]
        async with aiohttp.ClientSession() as http:
            for source in sources:
                url = source.split("://", 1)[1].rstrip("/")
                name = "zarr.json" if "zarr3" in source else "info"
                async with http.get(f"{url}/{name}", headers={"Origin": "https://x"}) as r:
                    assert r.status == 200
                    assert r.headers["Access-Control-Allow-Origin"] == "*"
            async with http.get(f"{base}/{ZARR_PATH}/c/1/1/1", headers={"Range": "bytes=-4"}) as r:
                assert r.status == 206
    finally:
        assert server.stop() == 0, "SIGTERM stops the server cleanly"
    assert (tmp_path / "demo" / ZARR_PATH / "zarr.json").exists(), "FOLDER is kept"


async def test_serve_writable_with_a_token_from_the_environment(tmp_path: Path) -> None:
    server = Running(str(tmp_path), "--writable", "--quiet", env={"ASYNCSHARD_TOKEN": "tok"})
    try:
        base = server.wait_for(r"at (http://127\.0\.0\.1:\d+)/").group(1)
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{base}/k", data=b"v") as r:
                assert r.status == 401
            async with http.put(
                f"{base}/k", data=b"v", headers={"Authorization": "Bearer tok"}
            ) as r:
                assert r.status == 201
    finally:
        server.stop()
    assert (tmp_path / "k").read_bytes() == b"v"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a store URL"),
        (["x", "--demo"], "give a store URL"),
        (["x", "--writable", "--unshard"], "excludes --writable"),
        (["x", "--cache-bytes", "lots"], "not a size"),
        (["unknown://x"], "UnknownSchemeError"),
        (["/no/such/folder"], "no such folder"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(serve, args)
    assert result.exit_code != 0
    assert message in result.output


def test_parse_size() -> None:
    assert parse_size("268435456") == 256 * 2**20
    assert parse_size("256M") == parse_size("256MiB") == parse_size("256mb") == 256 * 2**20
    assert parse_size("1G") == 2**30 and parse_size("4k") == 4096
    with pytest.raises(ValueError):
        parse_size("-1")
