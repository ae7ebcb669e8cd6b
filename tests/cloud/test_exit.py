"""Processes that used a cloud store exit cleanly (no SIGABRT at interpreter shutdown).

obstore completes futures from its worker threads; one still finishing that completion
when the interpreter finalizes used to abort the process (exit status 134). See
``asyncshard.backends.cloud.inflight``. Measured on moto before the fix: the reader
script below (which ends the moment its last read is back: no ``asyncio.run``
teardown, whose thread hand-offs often let the worker finish in time) aborted in about
28 % of runs, ``asyncshard cat`` in about 3 %; all 24 processes passing had a chance of
about 0.72**20 < 0.2 % before the fix (9 of 34 aborted in one run).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import asyncshard
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server

SRC = str(Path(asyncshard.__file__).resolve().parents[1])
READERS, UV_READERS, CLI_RUNS, PARALLEL = 20, 10, 4, 4
BLOB = b"exit-test " * 100

READER = f"""
import asyncio, sys
from asyncshard.backends import open_store

async def main():
    url, endpoint, key_id, secret = sys.argv[1:5]
    async with open_store(url, endpoint=endpoint, access_key_id=key_id,
                          secret_access_key=secret, region="us-east-1") as store:
        assert await store.get("blob") == {BLOB!r}

asyncio.new_event_loop().run_until_complete(main())
"""
#: The same reader on uvloop: its ``call_soon_threadsafe`` keeps the GIL throughout.
UV_READER = READER.replace("asyncio.new_event_loop()", "__import__('uvloop').new_event_loop()")
CLI = "from asyncshard.cli import main; main()"


def run_all(commands: list[tuple[list[str], dict[str, str]]]) -> tuple[Counter[int], bytes]:
    """Run the commands, ``PARALLEL`` at a time: their exit statuses, a failure's stderr."""
    codes: Counter[int] = Counter()
    failure = b""
    running: list[subprocess.Popen[bytes]] = []
    todo = list(commands)
    while todo or running:
        while todo and len(running) < PARALLEL:
            args, env = todo.pop()
            running.append(
                subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            )
        proc = running.pop(0)
        _, err = proc.communicate(timeout=60)
        codes[proc.returncode] += 1
        if proc.returncode:
            failure = failure or err
    return codes, failure


async def test_processes_using_s3_always_exit_zero(s3_server: S3Server) -> None:
    prefix = unique_prefix()
    async with s3_store_on(s3_server, prefix) as store:
        await store.set("blob", BLOB)
    url = f"s3://{s3_server.bucket}/{prefix}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": SRC,
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": s3_server.region,
    }
    args = [url, s3_server.endpoint, s3_server.access_key, s3_server.secret_key]
    assert "uvloop" in UV_READER
    on_asyncio = {**env, "ASYNCSHARD_EVENT_LOOP": "asyncio"}
    commands = [([sys.executable, "-c", READER, *args], env)] * READERS
    commands += [([sys.executable, "-c", UV_READER, *args], env)] * UV_READERS
    # the command line on its default loop (uvloop) and on asyncio's
    commands += [([sys.executable, "-c", CLI, "cat", url, "blob"], env)] * CLI_RUNS
    commands += [([sys.executable, "-c", CLI, "cat", url, "blob"], on_asyncio)] * CLI_RUNS
    start = time.monotonic()
    codes, failure = await asyncio.to_thread(run_all, commands)
    # -6 is SIGABRT (exit status 134 in a shell)
    assert codes == {0: len(commands)}, f"exit statuses {dict(codes)}: {failure[-2000:]!r}"
    assert time.monotonic() - start < 120


async def test_close_waits_for_requests_whose_caller_gave_up(s3_server: S3Server) -> None:
    """A cancelled read still runs to its end (obstore's future is not cancelled), and
    close() returns only when it has: nothing is left to complete during shutdown."""
    prefix = unique_prefix()
    async with s3_store_on(s3_server, prefix) as direct:
        await direct.set("blob", BLOB)
    proxy = FaultProxy(s3_server.endpoint, latency=0.3).start()
    try:
        store = s3_store_on(s3_server, prefix, endpoint=proxy.url)
        reader = asyncio.ensure_future(store.get("blob"))
        while not proxy._seen:  # the request reached the proxy
            await asyncio.sleep(0.01)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        assert proxy.log == []  # still held back by the proxy's latency
        await store.close()
        # a whole read is one ranged GET, open to the end (answered 206)
        assert [(s.method, s.status) for s in proxy.log] == [("GET", 206)]
    finally:
        proxy.stop()
