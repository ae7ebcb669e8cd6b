#!/usr/bin/env python
"""Small range GETs per second: the asyncshard server against a static file server.

The same folder of shard-sized files (``--files`` files of ``--file-mib`` MiB) is served
by

* ``asyncshard serve`` (``make_app`` over a ``LocalStore``: key validation, a version
  per object, ETag/Last-Modified, CORS, the access log off), and
* aiohttp's static file handler (``add_static``: ``sendfile``, Range, ETag), the usual
  "just serve the folder" baseline; and nginx too when it is installed.

Each server runs in its own process; one client process keeps ``--concurrency`` requests
in flight for ``--seconds`` (after a short warm-up), each a ``Range: bytes=a-b`` of
``--range-kib`` KiB at a random offset of a random file, the way a viewer reads chunks out
of shards. Every answer is checked (206 and the right length). Printed: requests/s of
each server and the asyncshard/static ratio. Run from the repository root::

    python benchmarks/bench_server.py                   # about 20 s
    python benchmarks/bench_server.py --seconds 10 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for benchmarks.common

from benchmarks.common import free_port, nginx_conf

STATIC_SERVER = """
import sys
from aiohttp import web
app = web.Application()
app.router.add_static("/", sys.argv[1], show_index=False, follow_symlinks=False)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), access_log=None, print=None)
"""
ASYNCSHARD_SERVER = """
import sys
from asyncshard.server.command import main
sys.argv = ["asyncshard serve", sys.argv[1], "--port", sys.argv[2], "--quiet"]
main()
"""
def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


@contextmanager
def server(kind: str, root: Path) -> Iterator[str]:
    """Run one server over ``root`` in a subprocess; yield its base URL."""
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    if kind == "nginx":
        conf = tmp / "nginx.conf"
        conf.write_text(nginx_conf(tmp, port, root))
        args = ["nginx", "-c", str(conf), "-p", str(tmp)]
    else:
        code = ASYNCSHARD_SERVER if kind == "asyncshard" else STATIC_SERVER
        args = [sys.executable, "-c", textwrap.dedent(code), str(root), str(port)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


async def load(
    base: str, names: list[str], size: int, span: int, concurrency: int, seconds: float
) -> float:
    """Requests per second over ``seconds`` with ``concurrency`` requests in flight."""
    rng = random.Random(42)
    done = 0
    stop_at = 0.0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            start = rng.randrange(0, size - span)
            headers = {"Range": f"bytes={start}-{start + span - 1}"}
            async with session.get(f"{base}/{rng.choice(names)}", headers=headers) as r:
                body = await r.read()
                if r.status != 206 or len(body) != span:
                    raise RuntimeError(f"{base}: got {r.status} with {len(body)} bytes")
            done += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        stop_at = time.monotonic() + 1.0  # warm-up: connections, page cache
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        done = 0
        began = time.monotonic()
        stop_at = began + seconds
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return done / (time.monotonic() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--file-mib", type=int, default=8)
    parser.add_argument("--range-kib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    size, span = args.file_mib * 2**20, args.range_kib * 1024
    kinds = ["static", "asyncshard"] + (["nginx"] if shutil.which("nginx") else [])
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        root = Path(tmp)
        names = [f"shards/c/{i}/0" for i in range(args.files)]
        for name in names:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(os.urandom(size))
        print(
            f"{args.files} files of {args.file_mib} MiB, {args.range_kib} KiB ranges, "
            f"{args.concurrency} in flight, {args.seconds:g} s per server, "
            f"{os.cpu_count()} CPUs"
        )
        rates: dict[str, float] = {}
        for kind in kinds:
            with server(kind, root) as base:
                rates[kind] = asyncio.run(
                    load(base, names, size, span, args.concurrency, args.seconds)
                )
            print(f"  {kind:<11} {rates[kind]:9.0f} requests/s")
        print(f"asyncshard / static (aiohttp) = {rates['asyncshard'] / rates['static']:.2f}")
        if "nginx" in rates:
            print(f"asyncshard / nginx            = {rates['asyncshard'] / rates['nginx']:.2f}")


if __name__ == "__main__":
    main()
