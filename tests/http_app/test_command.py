"""``asyncshard serve``: the click command, run for real in a subprocess."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
from pathlib import Path
from urllib.parse import unquote

import aiohttp
import psutil
import pytest
from click.testing import CliRunner

from asyncshard.server.command import serve
from asyncshard.server.demo import PRECOMPUTED_PATH, ZARR_PATH
from asyncshard.sizes import parse_size
from tests.http_app.process import SERVE, Running

#: Credentials for a test that never reaches a server that could check them.
UNUSED_KEYS = ["-o", "access_key_id=a", "-o", "secret_access_key=b", "-o", "region=us-east-1"]


async def test_serve_demo_prints_a_working_neuroglancer_link(tmp_path: Path) -> None:
    server = Running("--demo", str(tmp_path / "demo"), "--workers", "2")
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
        (["/no/such/folder", "--workers", "2"], "no such folder"),
        (["s3://b/p", "--endpoint", "http://127.0.0.1:9", *UNUSED_KEYS], "is unreachable"),
        (["x", "--workers", "0"], "--workers"),
        (["x", "--write-timeout", "0"], "--write-timeout"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(serve, args)
    assert result.exit_code != 0
    assert message in result.output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_workers_share_the_port_and_stop_together(tmp_path: Path, signum: int) -> None:
    """``--workers 2``: connections are spread over two worker processes (the access log
    names the PID that answered), and SIGTERM (or Ctrl-C's SIGINT) stops the whole process
    tree cleanly."""
    (tmp_path / "k").write_bytes(b"v")
    server = Running(str(tmp_path), "--workers", "2")
    try:
        base = server.url()
        connector = aiohttp.TCPConnector(force_close=True)  # a new connection per request
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(40):
                async with http.get(f"{base}/k") as r:
                    assert await r.read() == b"v"
        tree = psutil.Process(server.proc.pid).children(recursive=True)
        port = base.rsplit(":", 1)[1]
        again = [*SERVE, str(tmp_path), "--port", port, "--workers", "2"]
        taken = await asyncio.to_thread(subprocess.run, again, capture_output=True, text=True)
        assert taken.returncode != 0 and "Address already in use" in taken.stderr, taken
    finally:
        assert server.stop(signum) == 0, "the workers and the parent stop cleanly"
    pids = {int(pid) for pid in re.findall(r"pid=<(\d+)>", server.stderr())}
    assert len(pids) == 2, pids
    assert pids <= {child.pid for child in tree}, "answered by worker processes"
    assert not [p for p in tree if p.pid in pids and p.is_running()], "workers are gone"
    # multiprocessing's resource tracker leaves once it sees its parent gone
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == []


def test_parse_size() -> None:
    assert parse_size("268435456") == 256 * 2**20
    assert parse_size("256M") == parse_size("256MiB") == parse_size("256mb") == 256 * 2**20
    assert parse_size("1G") == 2**30 and parse_size("4k") == 4096
    with pytest.raises(ValueError):
        parse_size("-1")


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_a_busy_port_names_port_0(tmp_path: Path, workers: list[str]) -> None:
    """A port another program holds: one line naming ``--port 0``, no traceback."""
    (tmp_path / "k").write_bytes(b"v")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        taken = subprocess.run(
            [*SERVE, str(tmp_path), "--port", port, *workers],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert taken.returncode == 1, taken
    assert "--port 0" in taken.stderr and "Traceback" not in taken.stderr, taken.stderr
