"""``asyncshard cp -r`` against ``rclone copy``: a local folder uploaded to SeaweedFS.

Both are command-line processes run one after the other on the same server (``weed
mini`` on 127.0.0.1, started here), each into a fresh destination prefix per round,
the two tools interleaved round by round (rclone first in odd rounds) so that drift in
the machine's load hits both. Two data sets: many small objects (default 10,000 of
4 KiB) and a few large ones (default 20 of 256 MiB). rclone runs with its defaults
(``--transfers 4``, 5 MiB parts, 4 parts in flight per file) on an on-the-fly remote
(``:s3:`` with ``--s3-provider Other``, explicit endpoint and keys, no config file).

    python benchmarks/bench_copy.py                      # the full run
    python benchmarks/bench_copy.py --small 2000 --large 4 --large-mib 64 --rounds 1

Prints the seconds of each run, the best of each tool per data set and the ratio
asyncshard/rclone (below 1: asyncshard faster). Needs about
``large * large-mib`` of free disk twice (the source folder and the server's copy).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncshard
from tests.servers.s3 import S3Server
from tests.servers.seaweedfs import start_seaweedfs

SRC = str(Path(asyncshard.__file__).resolve().parents[1])


def make_tree(root: Path, count: int, size: int, fanout: int = 100) -> None:
    """``count`` files of ``size`` random bytes, ``fanout`` per folder."""
    block = os.urandom(max(size, 1) + count)
    for i in range(count):
        folder = root / f"d{i // fanout:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        if size >= 1 << 20:
            with (folder / f"f{i:06d}").open("wb") as f:
                for _ in range(size >> 20):
                    f.write(os.urandom(1 << 20))
        else:
            (folder / f"f{i:06d}").write_bytes(block[i : i + size])


def asyncshard_cmd(server: S3Server, src: Path, prefix: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "asyncshard",
        "cp",
        "-r",
        "-q",
        str(src),
        f"s3://{server.bucket}/{prefix}",
        "--endpoint",
        server.endpoint,
        "-o",
        f"access_key_id={server.access_key}",
        "-o",
        f"secret_access_key={server.secret_key}",
        "-o",
        f"region={server.region}",
    ]


def rclone_cmd(server: S3Server, src: Path, prefix: str, extra: list[str]) -> list[str]:
    rclone = shutil.which("rclone", path=os.path.dirname(sys.executable)) or "rclone"
    return [
        rclone,
        "copy",
        str(src),
        f":s3:{server.bucket}/{prefix}",
        "--s3-provider",
        "Other",
        "--s3-endpoint",
        server.endpoint,
        "--s3-access-key-id",
        server.access_key,
        "--s3-secret-access-key",
        server.secret_key,
        "--s3-region",
        server.region,
        "--config",
        os.devnull,
        *extra,
    ]


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of the command."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": tempfile.gettempdir()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def purge(server: S3Server, prefix: str) -> None:
    """Delete the round's copy (keeps the server's disk use flat)."""
    url = f"s3://{server.bucket}/{prefix}"
    flags = asyncshard_cmd(server, Path("."), prefix)[-8:]  # the storage flags
    subprocess.run(
        [sys.executable, "-m", "asyncshard", "rm", "-r", "-y", url, *flags],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC},
        capture_output=True,
        check=True,
    )


def bench(server: S3Server, name: str, src: Path, rounds: int, extra: list[str]) -> None:
    times: dict[str, list[float]] = {"asyncshard": [], "rclone": []}
    for round_ in range(rounds):
        order = ["rclone", "asyncshard"] if round_ % 2 == 0 else ["asyncshard", "rclone"]
        for tool in order:
            prefix = f"bench-{tool}-{uuid.uuid4().hex[:8]}"
            if tool == "asyncshard":
                seconds, cpu = timed(asyncshard_cmd(server, src, prefix))
            else:
                seconds, cpu = timed(rclone_cmd(server, src, prefix, extra))
            times[tool].append(seconds)
            print(
                f"  {name} round {round_ + 1}: {tool:10s} {seconds:7.2f} s, CPU {cpu:6.2f} s",
                flush=True,
            )
            purge(server, prefix)
    best = {tool: min(t) for tool, t in times.items()}
    print(
        f"{name}: asyncshard {best['asyncshard']:.2f} s, rclone {best['rclone']:.2f} s "
        f"(best of {rounds}); asyncshard/rclone = {best['asyncshard'] / best['rclone']:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=10_000, help="small objects")
    parser.add_argument("--small-kib", type=int, default=4, help="KiB per small object")
    parser.add_argument("--large", type=int, default=20, help="large objects")
    parser.add_argument("--large-mib", type=int, default=256, help="MiB per large object")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per tool and data set")
    parser.add_argument("--only", choices=["small", "large"], help="one data set only")
    parser.add_argument(
        "--rclone-arg", action="append", default=[], help="extra rclone flag (repeatable)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-copy-"))
    server = start_seaweedfs()
    try:
        print(f"server: SeaweedFS at {server.endpoint}; data in {work}", flush=True)
        if args.only != "large":
            make_tree(work / "small", args.small, args.small_kib << 10)
            bench(
                server,
                f"{args.small} x {args.small_kib} KiB",
                work / "small",
                args.rounds,
                args.rclone_arg,
            )
        if args.only != "small":
            make_tree(work / "large", args.large, args.large_mib << 20, fanout=args.large)
            bench(
                server,
                f"{args.large} x {args.large_mib} MiB",
                work / "large",
                args.rounds,
                args.rclone_arg,
            )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
