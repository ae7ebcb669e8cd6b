#!/usr/bin/env python
"""Where a conversion's time goes: py-spy samples of every thread, grouped by what they do.

Writes the Zarr array of ``bench_convert.py`` (``--size``^3 uint8, ``--chunk``^3
uncompressed chunks), then runs one conversion (``shard``, ``unshard`` or ``reshard``)
under ``py-spy record --threads`` (``pip install py-spy``) and sorts the samples of
busy threads into categories by their innermost recognised frame:

* kernel work, attributed to the Python frame that made the system call: reading,
  writing (create, write, rename, sync), unlinking, listing;
* path resolution (``realpath``), thread hops (handing work to worker threads and
  back), event loop and per-chunk coroutine machinery, shard building/splitting
  (copies), imports; idle samples (threads waiting for work) are left out.

``--src`` runs another checkout's ``src`` folder (e.g. the previous release, for a
before/after table)::

    python benchmarks/profile_convert.py shard
    python benchmarks/profile_convert.py unshard --src /tmp/old/src
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: (category, frame names): the first category with a frame in a sample's stack, searched
#: from the innermost frame outwards, takes the sample.
CATEGORIES: list[tuple[str, frozenset[str]]] = [
    ("idle (waiting for work)", frozenset({"_worker", "EpollSelector.select"})),
    ("kernel: unlink", frozenset({"_unlink", "unlink_many", "unlink"})),
    ("kernel: prune empty folders", frozenset({"Root.prune"})),
    ("path resolution (realpath)", frozenset({"_joinrealpath", "realpath", "Root.resolve"})),
    (
        "kernel: create, write, rename, sync",
        frozenset(
            {
                "FileWriter._create_temp",
                "FileWriter._write_data",
                "locked",
                "FileWriter.write",
                "FileWriter.write_batch",
                "FileWriter.link",
                "sync_file_system",
                "make_folders",
                "fdopen",
            }
        ),
    ),
    (
        "kernel: read",
        frozenset(
            {"LocalStore._read", "LocalStore._read_open", "LocalStore._read_in", "open_no_follow"}
        ),
    ),
    ("kernel: list", frozenset({"walk", "_entries"})),
    (
        "shard build/split (copies)",
        frozenset({"encode_shard", "decode_shard", "build_shard", "split_shard", "join"}),
    ),
    (
        "thread hops",
        frozenset(
            {
                "to_thread",
                "BaseEventLoop.run_in_executor",
                "ThreadPoolExecutor.submit",
                "wrap_future",
                "_chain_future",
                "_copy_future_state",
                "_call_set_state",
                "BaseSelectorEventLoop._write_to_self",
                "BaseSelectorEventLoop._read_from_self",
                "BaseEventLoop.call_soon_threadsafe",
                "_WorkItem.run",
            }
        ),
    ),
    ("imports", frozenset({"_find_and_load", "_call_with_frames_removed"})),
]
OTHER = "event loop, coroutines, planning, other Python"


def categorize(raw: Path) -> collections.Counter[str]:
    """Samples per category from py-spy's raw (collapsed stacks) output."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f.split(" (")[0] for f in stack.split(";")][1:]  # minus the thread's root
        if not frames:
            counts["idle (no Python frame)"] += int(n)
            continue
        for frame in reversed(frames):
            found = next((c for c, names in CATEGORIES if frame in names), None)
            if found is not None:
                counts[found] += int(n)
                break
        else:
            counts[OTHER] += int(n)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["shard", "unshard", "reshard"])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--shard", type=int, default=8)
    parser.add_argument("--reshard", type=int, default=4)
    parser.add_argument("--rate", type=int, default=250, help="samples per second (250)")
    parser.add_argument("--src", type=Path, default=None, help="asyncshard src folder to run")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy not found: pip install py-spy")
    from bench_convert import make_flat

    work = Path(tempfile.mkdtemp(prefix="profile-convert-", dir=args.dir))
    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    try:
        array = work / "array"
        make_flat(array, args.size, args.chunk)
        setup = {
            "shard": "",
            "unshard": f"shard_store({str(array)!r}, {args.shard})",
            "reshard": f"shard_store({str(array)!r}, {args.shard})",
        }[args.what]
        call = {
            "shard": f"shard_store({str(array)!r}, {args.shard})",
            "unshard": f"unshard_store({str(array)!r})",
            "reshard": f"reshard({str(array)!r}, {args.reshard})",
        }[args.what]
        imports = "from asyncshard.convert import reshard, shard_store, unshard_store"
        if setup:
            subprocess.run([sys.executable, "-c", f"{imports}; {setup}"], check=True, env=env)
        os.sync()
        script = (
            f"{imports}\nimport time\nt = time.perf_counter(); c = time.process_time()\n"
            f"{call}\nprint(f'wall {{time.perf_counter() - t:.2f}} s, "
            f"CPU {{time.process_time() - c:.2f}} s')"
        )
        raw = work / "samples.txt"
        subprocess.run(
            [
                "py-spy",
                "record",
                "--threads",
                "-r",
                str(args.rate),
                "-f",
                "raw",
                "-o",
                str(raw),
                "--",
                sys.executable,
                "-c",
                script,
            ],
            check=True,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        counts = categorize(raw)
        busy = sum(n for c, n in counts.items() if not c.startswith("idle"))
        print(
            f"{args.what}: {busy / args.rate:.2f} busy thread-seconds sampled; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        print("| where | share of busy samples |\n|---|---|")
        for category, n in counts.most_common():
            if not category.startswith("idle"):
                print(f"| {category} | {100 * n / busy:.0f}% |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
