#!/usr/bin/env python
"""Two small proxies that model the field on loopback, each run in a process of its own
(so that it does not share the benchmarked client's interpreter):

* ``latency``: a TCP proxy that delivers every server-to-client byte ``--delay`` seconds
  after it arrived (one round trip per request on a keep-alive connection; a new
  connection costs one more: the upstream connection is opened after the delay).
  Client-to-server bytes pass at once. Byte order is kept per connection.
  ``--connections FILE`` appends the time (``time.monotonic()``) of each accepted
  connection to FILE, one a line.
* ``throttle``: the throttling front of tests/servers/proxy.py (an aiohttp reverse
  proxy): above ``--rate`` requests per second (token bucket, ``--burst`` deep) it
  answers ``503 SlowDown`` in S3's XML form without ``Retry-After`` (``--status 429``:
  GCS's answer); ``GET /__proxy__/stats`` gives its counters (requests seen, refused).

Each prints its URL on its first line, then serves until its standard input closes::

    python benchmarks/field_proxies.py latency --upstream 127.0.0.1:8080 --delay 0.06
    python benchmarks/field_proxies.py throttle --upstream http://127.0.0.1:8333 --rate 150
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers


async def _pipe_now(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _pipe_late(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """Forward each piece ``delay`` seconds after it arrived, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        try:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    task = asyncio.ensure_future(deliver())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((loop.time() + delay, b""))
    await task


async def latency_proxy(upstream: str, delay: float, connections: str | None = None) -> None:
    host, _, port = upstream.rpartition(":")
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(connections, "a", buffering=1)) if connections else None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if log is not None:
                log.write(f"{time.monotonic():.6f}\n")
            await asyncio.sleep(delay)  # connecting costs a round trip too
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe_now(reader, up_writer), _pipe_late(up_reader, writer, delay))

        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        port_out = server.sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{port_out}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        server.close()


def throttle_front(upstream: str, rate: float, burst: float, status: int) -> None:
    from tests.servers.proxy import FaultProxy

    front = FaultProxy(upstream, rate=rate, burst=burst, throttle_status=status).start()
    print(front.url, flush=True)
    sys.stdin.read()
    front.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--upstream", required=True, help="host:port")
    lat.add_argument("--delay", type=float, required=True, help="seconds")
    lat.add_argument("--connections", help="append each accepted connection's time here")
    thr = sub.add_parser("throttle")
    thr.add_argument("--upstream", required=True, help="http://host:port")
    thr.add_argument("--rate", type=float, required=True, help="requests per second")
    thr.add_argument("--burst", type=float, default=10.0)
    thr.add_argument("--status", type=int, default=503, choices=(503, 429))
    args = parser.parse_args()
    if args.kind == "latency":
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(latency_proxy(args.upstream, args.delay, args.connections))
    else:
        throttle_front(args.upstream, args.rate, args.burst, args.status)


if __name__ == "__main__":
    main()
