"""``asyncshard serve --workers N``: N server processes sharing one port.

Each worker is a spawned process that runs the whole server (its own store, event loop
and shard-index cache) on a socket bound with ``SO_REUSEPORT``; the kernel spreads new
connections over the workers' listening sockets. The parent only supervises:

* ``--port 0``: the parent binds a placeholder socket (``SO_REUSEPORT``, never listening)
  to a free port, the workers bind that port, and the placeholder is closed once they
  listen; no other program can take the port in between. A port that another socket
  holds (even with ``SO_REUSEPORT``: another ``serve --workers``) is refused.
* The URL is printed once, when every worker listens.
* SIGINT or SIGTERM: the parent sends SIGTERM to every worker (each finishes cleanly,
  as a single server does), waits for them and exits 0. A worker that exits on its own
  (a crash, a failed bind) stops the others too, and the parent exits 1.

Processes are spawned, not forked: nothing of the parent's state (an event loop, open
connections of a store) leaks into the workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import socket
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess as Process
from types import FrameType

from asyncshard import loops
from asyncshard.server.runner import ServeConfig, configure_logging, serve_config

#: Seconds a worker has to stop after SIGTERM before it is killed (more than the
#: requests in flight get: ``runner.SHUTDOWN_TIMEOUT``).
STOP_TIMEOUT = 30.0


class WorkerFailed(Exception):
    """A worker exited without being asked to."""


class _Stop(Exception):
    """SIGTERM or SIGINT reached the parent."""


def _worker(config: ServeConfig, port: int, ready: Connection) -> None:
    """A worker process: serve ``config`` on ``port`` (shared); send its PID when ready."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; the loop re-arms it
    configure_logging(config.quiet)

    def listening(_bound: int) -> None:
        ready.send(os.getpid())
        ready.close()

    shared = dataclasses.replace(config, port=port)
    loops.run(serve_config(shared, ready=listening, check=False, reuse_port=True))


def _placeholder(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) with ``SO_REUSEPORT``, not listening.

    The port is first bound without ``SO_REUSEPORT``, which fails while any other socket
    holds it: a second server started on the same port is refused instead of silently
    sharing the connections.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's sockets
        probe.bind((host, port))
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _signals_stop() -> Iterator[None]:
    """Within the block SIGTERM and SIGINT raise :class:`_Stop`."""

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise _Stop

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_all(workers: list[Process]) -> None:
    for proc in workers:
        if proc.is_alive():
            proc.terminate()  # SIGTERM: a clean stop
    for proc in workers:
        proc.join(STOP_TIMEOUT)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _describe(proc: Process) -> str:
    code = proc.exitcode
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"worker {proc.name} (pid {proc.pid}) stopped with {how}"


def _start(config: ServeConfig, port: int, n: int) -> tuple[Connection, Process]:
    """Spawn worker ``n``; the connection receives its PID once it listens."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(config, port, send), name=f"asyncshard-{n}")
    proc.start()
    send.close()  # the worker holds the only write end: its exit makes recv() fail
    return receive, proc


def _until_listening(pending: dict[Connection, Process]) -> None:
    """Wait until every worker listens; :class:`WorkerFailed` if one exits first."""
    while pending:
        for conn in wait(list(pending)):
            assert isinstance(conn, Connection)
            proc = pending.pop(conn)
            try:
                conn.recv()
            except EOFError:
                proc.join(STOP_TIMEOUT)
                raise WorkerFailed(_describe(proc)) from None
            finally:
                conn.close()


def serve_workers(config: ServeConfig, ready: Callable[[int], None]) -> None:
    """Run ``config.workers`` worker processes on one port until SIGINT/SIGTERM.

    ``ready(port)`` is called once every worker listens. Raises :class:`WorkerFailed` if a
    worker exits on its own (the others are stopped first).
    """
    workers: list[Process] = []
    with _signals_stop(), _placeholder(config.host, config.port) as placeholder:
        port = placeholder.getsockname()[1]
        try:
            pending: dict[Connection, Process] = {}
            for n in range(1, config.workers + 1):
                conn, proc = _start(config, port, n)
                workers.append(proc)
                pending[conn] = proc
            _until_listening(pending)
            placeholder.close()
            ready(port)
            wait([proc.sentinel for proc in workers])
            raise WorkerFailed(_describe(next(p for p in workers if not p.is_alive())))
        except _Stop:
            pass
        finally:
            with _signals_ignored():
                _stop_all(workers)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Within the block a second Ctrl-C or SIGTERM does not interrupt the clean stop."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
