#!/usr/bin/env python
"""Requests per second of ``asyncshard serve --workers N``, measured with wrk.

A flat dataset of ``--chunks`` chunk files of ``--chunk-kib`` KiB (zarr-style keys
``c/<i>/<j>``) in a local folder is served by ``asyncshard serve --workers N --quiet``
for each N of ``--workers``; ``wrk`` keeps ``--connections`` connections busy for
``--seconds`` with GETs of random chunk URLs (a Lua script picks them). Printed: wrk's
requests/s and latency percentiles per N. Every answer must be a 200: wrk's count of
other statuses or socket errors fails the run.

wrk and the servers share the machine: on a 2-core machine two workers compete with the
load generator for the cores, so the gain from the second worker is smaller than on a
machine with a core to spare. Needs the Debian package ``wrk``: installed with apt-get
when missing and possible (as root), otherwise the script says what to install. Run from
the repository root::

    python benchmarks/bench_serve_workers.py                  # about 30 s
    python benchmarks/bench_serve_workers.py --workers 1 2 4 --seconds 20
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVE = [sys.executable, "-c", "from asyncshard.server.command import main; main()"]
LUA = """
local paths = {%s}
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  math.randomseed(7919 * id + 1)
end
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
"""


def ensure_wrk() -> str:
    """The path of ``wrk``; installed with apt-get if missing and possible."""
    found = shutil.which("wrk")
    if found:
        return found
    if shutil.which("apt-get") and os.geteuid() == 0:
        print("wrk is missing: apt-get install -y wrk", flush=True)
        install = ["apt-get", "install", "-y", "-q", "wrk"]
        if subprocess.run(install, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL, check=True)
            subprocess.run(install, stdout=subprocess.DEVNULL, check=True)
        found = shutil.which("wrk")
    if not found:
        sys.exit("this benchmark needs wrk: install the Debian package 'wrk' (apt-get install wrk)")
    return found


def write_dataset(root: Path, chunks: int, chunk_bytes: int) -> list[str]:
    """``chunks`` files of random bytes; their URL paths."""
    side = max(1, round(chunks**0.5))
    paths = []
    for n in range(chunks):
        key = f"array/c/{n // side}/{n % side}"
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(os.urandom(chunk_bytes))
        paths.append("/" + key)
    return paths


@contextmanager
def serving(root: Path, workers: int) -> Iterator[str]:
    """``asyncshard serve root --workers N`` on a free port; yield its base URL."""
    args = [*SERVE, str(root), "--port", "0", "--quiet", "--workers", str(workers)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"at (http://\S+?)/? ", line)
        if match is None:
            raise RuntimeError(f"the server did not start: {line!r}")
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        if code != 0:
            raise RuntimeError(f"the server exited with status {code}")


def run_wrk(wrk: str, url: str, script: Path, args: argparse.Namespace) -> dict[str, str]:
    """One wrk run; its requests/s and latency percentiles."""
    command = [
        wrk,
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{args.seconds:g}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for bad in ("Non-2xx or 3xx responses", "Socket errors"):
        if bad in out:
            raise RuntimeError(f"wrk reported failures:\n{out}")
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if rate is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    result = {"req/s": rate.group(1)}
    for pct in ("50%", "99%"):
        found = re.search(rf"^\s+{pct}\s+(\S+)", out, re.MULTILINE)
        result[pct] = found.group(1) if found else "?"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chunks", type=int, default=4096)
    parser.add_argument("--chunk-kib", type=int, default=16)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        root = Path(tmp) / "data"
        paths = write_dataset(root, args.chunks, args.chunk_kib * 1024)
        script = Path(tmp) / "random_chunks.lua"
        script.write_text(LUA % ", ".join(f'"{p}"' for p in paths))
        print(
            f"{args.chunks} chunks of {args.chunk_kib} KiB (LocalStore), wrk: "
            f"{args.connections} connections, {args.threads} thread(s), {args.seconds:g} s; "
            f"{os.cpu_count()} CPUs shared by wrk and the server"
        )
        print(f"{'workers':>8} {'req/s':>10} {'p50':>10} {'p99':>10}")
        for workers in args.workers:
            with serving(root, workers) as url:
                run_wrk(wrk, url, script, argparse.Namespace(**{**vars(args), "seconds": 2}))
                result = run_wrk(wrk, url, script, args)
            print(f"{workers:>8} {result['req/s']:>10} {result['50%']:>10} {result['99%']:>10}")


if __name__ == "__main__":
    main()
