"""Clients that stop reading cost bounded memory, and never block the other clients."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import psutil
import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local import descriptors
from asyncshard.server import reads
from asyncshard.server.app import BUDGET, STALLS, make_app
from asyncshard.server.budget import ByteBudget
from asyncshard.server.config import DEFAULT_BUFFER_BYTES, AppConfig
from tests.http_app.conftest import running
from tests.http_app.process import Running

MiB = 1 << 20
STALLED = 300
#: The documented bound (docs/ARCHITECTURE.md, server/app.py): the budget of buffered piece
#: bytes, plus at most this much per open connection (a socket write slice in the
#: transport's buffer, aiohttp's per-connection objects).
PER_CONNECTION = 128 * 1024


def stalled_readers(port: int, path: str, count: int) -> list[socket.socket]:
    """``count`` connections that send a GET and never read; small receive windows keep
    the kernel's share small, so the server's buffers are what fills up."""
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        socks.append(s)
    return socks


def wait_answered(socks: list[socket.socket], timeout: float = 60.0) -> None:
    """Until the server has started answering every connection (nothing is read)."""
    pending = list(socks)
    deadline = time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} connections got no answer"
        readable, _, _ = select.select(pending, [], [], 1.0)
        pending = [s for s in pending if s not in readable]


async def close_and_wait_for(budget: ByteBudget, socks: list[socket.socket]) -> None:
    """Close the connections (aiohttp cancels their handlers: ``handler_cancellation``)
    and wait, up to 5 s, until every byte of ``budget`` is returned."""
    for s in socks:
        s.close()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if budget.free == budget.total:
            break
    assert budget.free == budget.total


@contextmanager
def peak_rss(pid: int) -> Iterator[dict[str, int]]:
    """Measure the peak resident size of ``pid`` over the block (Linux ``VmHWM``)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current RSS
    out = {"before": psutil.Process(pid).memory_info().rss}
    yield out
    with open(f"/proc/{pid}/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    out["peak"] = int(hwm.split()[1]) * 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
async def test_stalled_readers_cost_bounded_memory(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with open(root / "big", "wb") as f:
        f.truncate(64 * MiB)  # sparse: the server reads zeros, the disk holds nothing
    (root / "small").write_bytes(b"s" * 16384)
    server = Running(str(root), "--quiet")
    socks: list[socket.socket] = []
    try:
        url = server.url()
        port = int(url.rsplit(":", 1)[1])
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/big") as r:  # warm up: imports, first buffers
                assert len(await r.read()) == 64 * MiB
            with peak_rss(server.proc.pid) as rss:
                socks = stalled_readers(port, "/big", STALLED)
                await asyncio.to_thread(wait_answered, socks)
                async with http.get(f"{url}/small") as r:
                    assert await r.read() == b"s" * 16384
                async with http.get(f"{url}/big") as r:
                    assert len(await r.read()) == 64 * MiB
        growth = rss["peak"] - rss["before"]
        bound = DEFAULT_BUFFER_BYTES + STALLED * PER_CONNECTION
        print(f"peak RSS growth with {STALLED} stalled readers: {growth / MiB:.0f} MiB")
        assert growth < bound, f"{growth / MiB:.0f} MiB > {bound / MiB:.0f} MiB"
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0


async def test_a_stalled_reader_is_dropped_and_its_budget_returned(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with open(root / "big", "wb") as f:
        f.truncate(32 * MiB)
    app = make_app(LocalStore(root), AppConfig(write_timeout=0.5, buffer_bytes=8 * MiB))
    budget = app[BUDGET]
    async with running(app) as url:
        port = int(url.rsplit(":", 1)[1])
        (sock,) = stalled_readers(port, "/big", 1)
        try:
            await asyncio.to_thread(wait_answered, [sock])
            for _ in range(100):
                await asyncio.sleep(0.05)
                if budget.free == budget.total:
                    break
            assert budget.free == budget.total, "the stalled connection's piece is returned"
            assert app[STALLS].dropped == 1
            sock.setblocking(True)
            sock.settimeout(10)
            received = 0
            while chunk := sock.recv(1 << 20):  # the server dropped the connection
                received += len(chunk)
            assert received < 32 * MiB
        finally:
            sock.close()


async def test_a_client_that_disconnects_mid_body_returns_its_budget(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with open(root / "big", "wb") as f:
        f.truncate(32 * MiB)
    app = make_app(LocalStore(root), AppConfig(buffer_bytes=8 * MiB))
    budget = app[BUDGET]
    async with running(app) as url:
        port = int(url.rsplit(":", 1)[1])
        socks = stalled_readers(port, "/big", 4)
        await asyncio.to_thread(wait_answered, socks)
        assert budget.free < budget.total, "stalled bodies hold pieces"
        await close_and_wait_for(budget, socks)
        assert app[STALLS].dropped == 0, "closed, not timed out"


@pytest.mark.parametrize("kept", [True, False])
async def test_a_client_that_disconnects_in_the_first_piece_returns_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """A body of at most 1 MiB is read whole by the first read (or is a kept body) and
    written from that one piece: a client that disconnects while it is written gets
    its reservation returned all the same. (The kernel's socket buffers take a whole
    MiB on loopback, so the write that never completes is made to hang here.)"""
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)  # the file counts as settled
    hang = asyncio.Event()
    write = reads.Out._write

    async def hanging(self: reads.Out, data: object) -> None:
        if hang.is_set() and data is not None:
            await asyncio.Event().wait()  # a client that stopped reading
        await write(self, data)  # type: ignore[arg-type]

    monkeypatch.setattr(reads.Out, "_write", hanging)
    root = tmp_path / "root"
    root.mkdir()
    (root / "chunk").write_bytes(os.urandom(900_000))
    app = make_app(
        LocalStore(root),
        AppConfig(buffer_bytes=512 * MiB, data_cache_bytes=8 * MiB if kept else 0),
    )
    budget = app[BUDGET]
    async with running(app) as url, aiohttp.ClientSession() as http:
        async with http.get(f"{url}/chunk") as r:  # read once: kept (or not)
            assert len(await r.read()) == 900_000
        assert budget.free == budget.total
        hang.set()
        port = int(url.rsplit(":", 1)[1])
        socks = stalled_readers(port, "/chunk", 4)
        await asyncio.to_thread(wait_answered, socks)
        assert budget.total - budget.free == 4 * 900_000, "each holds its piece"
        await close_and_wait_for(budget, socks)
