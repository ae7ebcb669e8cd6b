#!/usr/bin/env python
"""Requests per second of HTTP servers for viewers, measured with wrk, in one run.

One dataset, written by tensorstore: a 512x512x256 uint8 Zarr v3 array with 32^3 chunks
(``--chunk 64``: 64^3, 256 KiB each), once flat (``flat/``: 2,048 chunk files) and once
sharded (``arr/``: 128 shards). Served:

* **nginx** over the flat files (the ceiling of a static server);
* **minimal aiohttp handlers** (``minimal_server.py``): the flat files opened, read and
  closed per request; the inner chunks by one ``pread`` from shard files opened, and
  their indexes read, at start-up (the floor of Python per-request cost);
* **asyncshard serve** over the flat files;
* **asyncshard serve --unshard** over the shards (inner chunks read out of the shards);

each asyncshard server with ``--workers`` 1 and 2. ``wrk`` keeps ``--connections``
connections busy with GETs of random chunk URLs. The "revalidated" rows send each GET
with ``If-None-Match`` and the ETag the server gave for that chunk, as a browser does
under ``Cache-Control: no-cache`` (answered 304; the minimal handlers have no
validators, so they are compared with their plain answers). Printed per server, median of
``--rounds`` interleaved rounds: requests/s, the server's CPU time per request (all its
processes; robust when other work shares the machine), wrk's own CPU time per request,
the cores the two kept busy together, the ratio of requests/s to the
minimal handler on the same data (``x minimal``) and, for two workers, to one. With
``--baseline-src``, an
older source tree is served too (one worker), for a before/after in one run. Every
answer must be a 200.

wrk shares the machine with the server: on 2 cores, two workers compete with the load
generator, so ``--workers 2`` gains less than on a machine with a core to spare. wrk
and nginx are Debian packages, apt-installed when missing and possible (as root);
otherwise the script says what to install.

    python benchmarks/bench_serve.py [--seconds 8] [--rounds 3] [--workers 1 2] [--chunk 64]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asyncshard.loops import ENV as LOOP_ENV
from benchmarks.common import sharding_codec
from benchmarks.nginx import Nginx
from tests.servers import debian

SERVE = [sys.executable, "-c", "from asyncshard.server.command import main; main()"]
MINIMAL = [sys.executable, str(Path(__file__).with_name("minimal_server.py"))]
SHAPE, CHUNK, SHARD = (512, 512, 256), 32, (128, 64, 64)
GRID = tuple(s // CHUNK for s in SHAPE)
#: What every wrk script starts with: the paths asked (``%s``), a seed per thread.
LUA_SETUP = """
local paths = {%s}
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  math.randomseed(7919 * id + 1)
end
"""
LUA = (
    LUA_SETUP
    + """request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
"""
)
#: Requests as a browser revalidates under ``Cache-Control: no-cache``: each path with
#: ``If-None-Match`` and the ETag the server gave for it (``etags``, the second ``%s``).
LUA_REVALIDATE = (
    LUA_SETUP
    + """local etags = {%s}
request = function()
  local i = math.random(#paths)
  return wrk.format("GET", paths[i], {["If-None-Match"] = etags[i]})
end
"""
)


def ensure_wrk() -> str:
    """The path of ``wrk``; installed with apt-get if missing and possible."""
    try:
        return debian.ensure("wrk")
    except RuntimeError as exc:
        raise SystemExit(f"this benchmark needs wrk: {exc}") from None


def write_dataset(root: Path, chunk: int = CHUNK) -> None:
    """The array flat (``flat/``) and sharded (``arr/``), with ``chunk``^3 chunks."""
    data = np.random.default_rng(0).integers(0, 255, SHAPE, dtype=np.uint8)
    sharding = sharding_codec(chunk)
    for name, grid, codecs in (
        ("arr", list(SHARD), [sharding]),
        ("flat", [chunk] * 3, [{"name": "bytes"}]),
    ):
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{root}/{name}/"},
            "metadata": {
                "shape": list(SHAPE),
                "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
                "codecs": codecs,
            },
            "create": True,
        }
        ts.open(spec).result()[...] = data


def chunk_paths(array: str, n: int = 2000, chunk: int = CHUNK) -> list[str]:
    """The ``n`` random chunk URLs wrk asks (the same in every run)."""
    rng = random.Random(5)
    x, y, z = (s // chunk for s in SHAPE)
    return [
        f"/{array}/c/{rng.randrange(x)}/{rng.randrange(y)}/{rng.randrange(z)}" for _ in range(n)
    ]


def lua_script(folder: Path, array: str, chunk: int = CHUNK) -> Path:
    script = folder / f"{array}.lua"
    script.write_text(LUA % ", ".join(f'"{p}"' for p in chunk_paths(array, chunk=chunk)))
    return script


def revalidation_script(folder: Path, url: str, array: str, chunk: int = CHUNK) -> Path:
    """A wrk script revalidating the chunks of :func:`chunk_paths` with the ETags the
    server at ``url`` gives them now (one plain GET per distinct path first)."""
    paths = chunk_paths(array, chunk=chunk)
    etags: dict[str, str] = {}
    for path in paths:
        if path not in etags:
            with urllib.request.urlopen(url + path) as answer:
                etags[path] = answer.headers["ETag"]
    script = folder / f"{array}-revalidate.lua"
    quoted = ", ".join(f"[=[{etags[p]}]=]" for p in paths)
    script.write_text(LUA_REVALIDATE % (", ".join(f'"{p}"' for p in paths), quoted))
    return script


@contextmanager
def serving(args: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Run a server that prints ``... at http://HOST:PORT/ ...``; yields that base URL
    and its pid, and stops it with SIGTERM."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"at (http://\S+?)/? ", line)
        if match is None:
            raise RuntimeError(f"the server did not start: {line!r}")
        yield match.group(1), proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def minimal_serving(root: Path, array: str, loop: str) -> Any:
    """The reference aiohttp handler (``minimal_server.py``) for ``array`` on ``loop``:
    flat files opened per request, or inner chunks by ``pread`` from shard files opened
    at start."""
    env = {**os.environ, LOOP_ENV: loop}
    if array == "flat":
        return serving([*MINIMAL, "flat", str(root)], env)
    return serving([*MINIMAL, "shards", str(root), array], env)


@contextmanager
def asyncshard_serving(
    root: Path,
    workers: int,
    unshard: bool,
    src: str | None = None,
    extra: tuple[str, ...] = (),
    loop: str = "uvloop",
) -> Iterator[tuple[str, int]]:
    """``asyncshard serve`` on a free port and ``loop``; yields its base URL and the
    parent's pid.

    ``src``: run the asyncshard of another source tree (``PYTHONPATH``), e.g. an older
    commit's, which has no ``--workers`` (only 1 then)."""
    args = [*SERVE, str(root), "--port", "0", "--quiet"]
    if src is None:
        args += ["--workers", str(workers)]
    if unshard:
        args.append("--unshard")
    args += extra
    env = {**os.environ, LOOP_ENV: loop}
    if src:
        env["PYTHONPATH"] = src
    with serving(args, env) as found:
        yield found


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@dataclass(frozen=True)
class Measured:
    """One wrk run: requests/s, and CPU microseconds per request of the server (all its
    processes) and of wrk itself."""

    rate: float
    server_cpu: float
    wrk_cpu: float

    def cores(self) -> float:
        """The cores the server and wrk kept busy together."""
        return self.rate * (self.server_cpu + self.wrk_cpu) / 1e6


def run_wrk(
    wrk: str, url: str, script: Path, seconds: float, connections: int, pid: int
) -> Measured:
    """One wrk run against the server ``pid``."""
    command = [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script), url]
    before, wrk_before = tree_cpu(pid), children_cpu()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    cpu, wrk_cpu = tree_cpu(pid) - before, children_cpu() - wrk_before
    for bad in ("Non-2xx or 3xx responses", "Socket errors"):
        if bad in out:
            raise RuntimeError(f"wrk reported failures:\n{out}")
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rate is None or total is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    n = int(total.group(1))
    return Measured(float(rate.group(1)), 1e6 * cpu / n, 1e6 * wrk_cpu / n)


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended (wrk, once it is waited for;
    the servers run until the end of their case)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--loops",
        nargs="+",
        choices=["asyncio", "uvloop"],
        default=["asyncio", "uvloop"],
        help="the event loops the Python servers run on (ASYNCSHARD_EVENT_LOOP); two "
        "workers run on the last",
    )
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--chunk",
        type=int,
        choices=[32, 64],
        default=CHUNK,
        help="chunk edge: 32 (32 KiB chunks) or 64 (256 KiB); the shards stay 128x64x64",
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline-src",
        help="also serve with the asyncshard of this source tree (e.g. a worktree of an "
        "older commit's src/), one worker, for a before/after in the same run",
    )
    args = parser.parse_args()
    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp) / "data"
        write_dataset(root, args.chunk)
        scripts = {a: lua_script(Path(tmp), a, args.chunk) for a in ("flat", "arr")}
        cases = [
            Case("nginx, flat files", "flat", "nginx"),
            Case("nginx, flat files, revalidated", "flat", "nginx", revalidate=True),
        ]
        for loop in args.loops:
            cases += [
                Case(
                    f"minimal aiohttp, flat (open/read/close), {loop}", "flat", "minimal", loop=loop
                ),
                Case(
                    f"minimal aiohttp, shards (pread, open fds), {loop}",
                    "arr",
                    "minimal",
                    loop=loop,
                ),
            ]
        if args.baseline_src:  # an older tree runs asyncio's loop (it may predate the choice)
            cases.append(Case("baseline serve, flat", "flat", "baseline", loop="asyncio"))
            cases.append(Case("baseline serve --unshard", "arr", "baseline", loop="asyncio"))
        for loop in args.loops:
            cases.append(Case(f"asyncshard serve, flat, {loop}", "flat", "serve", loop=loop))
            cases.append(Case(f"asyncshard serve --unshard, {loop}", "arr", "serve", loop=loop))
            for label, array in ((f", flat, {loop}", "flat"), (f" --unshard, {loop}", "arr")):
                cases.append(
                    Case(
                        f"asyncshard serve{label}, revalidated",
                        array,
                        "serve",
                        loop=loop,
                        revalidate=True,
                    )
                )
        loop = args.loops[-1]
        cases.append(
            Case(
                f"asyncshard serve --unshard, no data cache, {loop}",
                "arr",
                "serve",
                1,
                NO_DATA_CACHE,
                loop,
            )
        )
        for workers in args.workers:
            if workers == 1:
                continue
            cases.append(
                Case(
                    f"asyncshard serve, flat, {loop}, --workers {workers}",
                    "flat",
                    "serve",
                    workers,
                    loop=loop,
                )
            )
            cases.append(
                Case(
                    f"asyncshard serve --unshard, {loop}, --workers {workers}",
                    "arr",
                    "serve",
                    workers,
                    loop=loop,
                )
            )
        results: dict[str, list[Measured]] = {}
        for _ in range(args.rounds):
            for case in cases:
                script = scripts[case.array]
                if case.kind == "nginx":
                    with Nginx(root) as server:
                        if case.revalidate:
                            script = revalidation_script(
                                Path(tmp), server.url, case.array, args.chunk
                            )
                        measured = run_wrk_nginx(wrk, server, script, args)
                    results.setdefault(case.label, []).append(measured)
                    continue
                if case.kind == "minimal":
                    server_cm = minimal_serving(root, case.array, case.loop)
                else:
                    src = args.baseline_src if case.kind == "baseline" else None
                    server_cm = asyncshard_serving(
                        root, case.workers, case.array == "arr", src, case.extra, case.loop
                    )
                with server_cm as (url, pid):
                    if case.revalidate:
                        script = revalidation_script(Path(tmp), url, case.array, args.chunk)
                    run_wrk(wrk, url, script, 1, args.connections, pid)  # warm up
                    measured = run_wrk(wrk, url, script, args.seconds, args.connections, pid)
                results.setdefault(case.label, []).append(measured)
        load = os.getloadavg()[0]
        print(
            f"{SHAPE} uint8, {args.chunk}^3 chunks ({args.chunk**3 // 1024} KiB), "
            f"wrk {args.connections} connections, "
            f"{args.seconds:g} s, median of {args.rounds} rounds, {os.cpu_count()} CPUs, "
            f"load {load:.1f}"
        )
        medians = {
            label: Measured(
                statistics.median(m.rate for m in runs),
                statistics.median(m.server_cpu for m in runs),
                statistics.median(m.wrk_cpu for m in runs),
            )
            for label, runs in results.items()
        }
        minimal = {(c.array, c.loop): medians[c.label].rate for c in cases if c.kind == "minimal"}
        print(
            f"{'server':52} {'req/s':>8} {'CPU-us/req':>11} {'wrk CPU-us':>11} {'cores':>6} "
            f"{'x minimal':>10} {'x 1 worker':>11}"
        )
        for case in cases:
            m = medians[case.label]
            one = medians.get(case.label.replace(f", --workers {case.workers}", ""))
            scaling = f"{m.rate / one.rate:11.2f}" if case.workers > 1 and one else " " * 11
            ref = minimal.get((case.array, case.loop))
            ratio = f"{m.rate / ref:10.2f}" if ref else " " * 10
            print(
                f"{case.label:52} {m.rate:8.0f} {m.server_cpu:11.0f} {m.wrk_cpu:11.0f} "
                f"{m.cores():6.2f} {ratio} {scaling}"
            )
        print(
            "cores: what the server and wrk kept busy together, of the machine's "
            f"{os.cpu_count()} (wrk runs beside the server)"
        )


@dataclass(frozen=True)
class Case:
    """One server of the run: what it serves (``flat`` or ``arr``) and how."""

    label: str
    array: str
    kind: str  # nginx, minimal, serve or baseline
    workers: int = 1
    extra: tuple[str, ...] = ()
    loop: str = ""  # the Python servers' event loop; compared with the minimal one on it
    revalidate: bool = False  # every request with If-None-Match and its current ETag


NO_DATA_CACHE = ("--data-cache-bytes", "0")


def run_wrk_nginx(wrk: str, server: Nginx, script: Path, args: argparse.Namespace) -> Measured:
    run_wrk(wrk, server.url, script, 1, args.connections, server.pid)
    return run_wrk(wrk, server.url, script, args.seconds, args.connections, server.pid)


if __name__ == "__main__":
    main()
