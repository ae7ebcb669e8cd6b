#!/usr/bin/env python
"""OME-Zarr 0.4 (Zarr v2) to sharded OME-Zarr 0.5: asyncshard beside ome2024-ngff-challenge.

The same source, written by ome-zarr-py into a temporary folder, is converted by

* **asyncshard**: ``asyncshard shard SRC auto --to DEST -q --shard-bytes B -j N``
  (chunk bytes moved as they are, source codecs kept);
* **resave**: ``ome2024-ngff-challenge resave --cc-by --silent SRC DEST
  --output-threads N`` (tensorstore reads, decodes and re-encodes every chunk with its
  fixed codecs, blosc zstd level 5), asked by default (``--peer-shards asyncshard``)
  for the shard shape asyncshard chose for each array, through ``--output-read-details``
  with the source chunks as inner chunks; ``--peer-shards whole`` leaves it its own
  default (one shard per array).

Source: a c,z,y,x uint16 image of ``--shape`` (default 2,64,512,512: 64 MiB at level
0), 3 levels (scale factors 2 and 4), zstd chunks of ``--chunk`` (default 1,8,32,32;
1,32,128,128 is 1 MiB, as realistic images have), written by
``tests.convert.ome_data.write_image_04`` with a uint8 ``labels/cells`` pyramid unless
``--no-labels``. If resave fails on the image with labels, both tools also run on a copy
without ``labels/``.

Measured: each conversion as a CLI in a fresh subprocess (so interpreter start and
imports count; a ``--help`` run of each CLI is printed for scale): wall time, CPU time
(user + system) and peak RSS of the child (``os.wait4`` in a lean launcher process,
whose ~10 MB is the floor of ``ru_maxrss``), over ``--rounds`` rounds (default 3) with
the tools interleaved (their order alternating), medians kept; objects written (files
in DEST) and their bytes. Before the rounds, one untimed run of each tool (warms the
page cache and the bytecode cache, which the children keep under
``~/.cache/asyncshard-bench/pycache`` even where ``PYTHONDONTWRITEBYTECODE`` is set,
and reads asyncshard's shard shapes). Dirty pages are flushed (``os.sync``) before each
run and the destination deleted; the page cache stays warm; both tools make their writes
durable (asyncshard's ``LocalStore`` syncs, tensorstore's ``file`` kvstore has
``file_io_sync``). Every array of the last round's outputs is read back with zarr-python
and compared with the source before the table is printed. Numbers mean something only on
a quiet machine: the load average is printed with the table.

resave needs ``zarr==3.0.0a0``, which conflicts with this environment: it is installed
on first use into its own venv (``--venv``, default
``~/.cache/asyncshard-bench/venv-ngff``) from PyPI and reused. From the repository root::

    python benchmarks/bench_ome.py                          # 64 MiB with labels
    python benchmarks/bench_ome.py --no-labels --chunk 1,32,128,128
    python benchmarks/bench_ome.py --shape 2,32,256,256 --rounds 1 --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.convert.ome_data

PEER_SPEC = "ome2024-ngff-challenge==1.0.3"
CACHE = Path.home() / ".cache" / "asyncshard-bench"
DEFAULT_VENV = CACHE / "venv-ngff"
# Bytecode cached as on an ordinary install, outside the repository, for both tools.
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPYCACHEPREFIX": str(CACHE / "pycache"),
}
DEFAULT_CHUNK = (1, 8, 32, 32)
MB = 1e6
TOOLS = ("asyncshard", "resave")


def parse_ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- source data ------------------------------------------------------------------------


def write_source(path: Path, shape: tuple[int, ...], chunk: tuple[int, ...], labels: bool) -> Any:
    """The OME-Zarr 0.4 source at ``path``; returns level 0."""
    from tests.convert.ome_data import write_image_04

    return write_image_04(path, shape, chunk, labels=labels)


def array_paths(root: Path) -> list[str]:
    """Paths of the Zarr v2 arrays below ``root``."""
    return sorted(p.parent.relative_to(root).as_posix() for p in root.rglob(".zarray"))


def tree_size(root: Path) -> tuple[int, int]:
    """(files, bytes) below ``root``."""
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


# -- the tools --------------------------------------------------------------------------


def ensure_venv(venv: Path) -> Path:
    """The resave CLI in ``venv``, created and installed from PyPI on first use."""
    cli = venv / "bin" / "ome2024-ngff-challenge"
    if not cli.exists():
        print(f"installing {PEER_SPEC} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, PEER_SPEC], check=True)
    return cli


def versions(venv: Path) -> dict[str, str]:
    from importlib.metadata import version

    probe = (
        "import json, platform; from importlib.metadata import version; "
        "print(json.dumps({'python': platform.python_version(), **{n: version(n) for n in "
        "('ome2024-ngff-challenge', 'tensorstore', 'zarr', 'numpy')}}))"
    )
    peer = json.loads(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True
        ).stdout
    )
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "src"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "main env": f"python {sys.version.split()[0]}, asyncshard {version('asyncshard')} "
        f"(commit {commit}{' + uncommitted changes in src/' if dirty else ''}), "
        f"zarr {version('zarr')}, ome-zarr {version('ome-zarr')}, numpy {version('numpy')}",
        "resave env": f"python {peer['python']}, ome2024-ngff-challenge "
        f"{peer['ome2024-ngff-challenge']}, tensorstore {peer['tensorstore']}, "
        f"zarr {peer['zarr']}, numpy {peer['numpy']}",
    }


@dataclass
class Run:
    seconds: float  # wall
    cpu: float  # user + system seconds
    rss: int  # bytes
    error: str = ""


# A lean parent for each measured command: a child's ru_maxrss starts from its parent's
# peak at exec (fork and vfork keep it), which here would be this process's numpy and zarr.
LAUNCHER = """
import json, os, sys, time
started = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as out:
    cpu = usage.ru_utime + usage.ru_stime
    json.dump({"s": seconds, "cpu": cpu, "rss": usage.ru_maxrss * 1024, "exit": code}, out)
"""


def run_child(cmd: list[str], log: Path) -> Run:
    """Run ``cmd`` (output to ``log``) under :data:`LAUNCHER`: its wall time and peak RSS."""
    os.sync()
    answer = log.with_suffix(".json")
    with log.open("wb") as out:
        launcher = [sys.executable, "-S", "-E", "-c", LAUNCHER, str(answer), *cmd]
        subprocess.run(launcher, stdout=out, stderr=subprocess.STDOUT, env=CHILD_ENV, check=True)
    got = json.loads(answer.read_text())
    error = ""
    if got["exit"] != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line.split(":")[0]]
        first = (errors or lines or [f"exit status {got['exit']}"])[-1]
        error = first.split(" [tensorstore_spec=")[0][:300]
    return Run(got["s"], got["cpu"], got["rss"], error)


@dataclass
class Case:
    """One source and what each tool did with it."""

    name: str
    src: Path
    paths: list[str]  # its arrays
    details: Path  # resave's --output-read-details file
    asked: dict[str, str] = field(default_factory=dict)
    shards: dict[str, dict[str, tuple[list[int], list[int]]]] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # (objects, bytes)

    def failed(self, tool: str) -> str:
        runs = self.runs.get(tool)
        return runs[0].error if runs else ""


@dataclass
class Tools:
    """How each tool is run."""

    asyncshard: str
    resave: Path
    shard_bytes: str
    in_flight: int
    peer_shards: str
    work: Path

    def command(self, case: Case, tool: str, dest: Path) -> list[str]:
        if tool == "asyncshard":
            return [
                *(self.asyncshard, "shard", str(case.src), "auto", "--to", str(dest), "-q"),
                *("--shard-bytes", self.shard_bytes, "-j", str(self.in_flight)),
            ]
        extra = ["--output-read-details", str(case.details)]
        return [
            *(str(self.resave), "resave", "--cc-by", "--silent", str(case.src), str(dest)),
            *("--output-threads", str(self.in_flight)),
            *(extra if self.peer_shards == "asyncshard" else []),
        ]

    def run(self, case: Case, tool: str) -> Run:
        """One conversion of ``case`` by ``tool`` into a fresh ``work/TOOL.zarr``."""
        dest = self.work / f"{tool}.zarr"
        shutil.rmtree(dest, ignore_errors=True)
        return run_child(self.command(case, tool, dest), self.work / "log")

    def prepare(self, case: Case) -> bool:
        """Untimed first run of each tool (asyncshard's shard shapes go to resave's
        details file); False if resave fails."""
        got = self.run(case, "asyncshard")
        if got.error:
            raise SystemExit(f"asyncshard failed on {case.name}: {got.error}")
        shards = case.shards["asyncshard"] = shard_shapes(self.work / "asyncshard.zarr", case.paths)
        details = {str(case.src / p): {"chunks": c, "shards": s} for p, (c, s) in shards.items()}
        case.details.write_text(json.dumps(details))
        case.asked = {
            "asyncshard": f"auto, --shard-bytes {self.shard_bytes}, -j {self.in_flight}",
            "resave": (
                "asyncshard's shard shapes (--output-read-details)"
                if self.peer_shards == "asyncshard"
                else "its default shards (one per array)"
            )
            + f", --output-threads {self.in_flight}",
        }
        got = self.run(case, "resave")
        if got.error:
            case.runs["resave"] = [got]
            print(f"resave failed on {case.name}: {got.error}")
        else:
            case.shards["resave"] = shard_shapes(self.work / "resave.zarr", case.paths)
        return not got.error


def shard_shapes(dest: Path, paths: list[str]) -> dict[str, tuple[list[int], list[int]]]:
    """``{array path: (inner chunk shape, shard shape)}`` of a sharded copy."""
    out = {}
    for path in paths:
        doc = json.loads((dest / path / "zarr.json").read_text())
        codec = doc["codecs"][0]
        assert codec["name"] == "sharding_indexed", (path, codec["name"])
        shard = doc["chunk_grid"]["configuration"]["chunk_shape"]
        out[path] = (codec["configuration"]["chunk_shape"], shard)
    return out


def verify(case: Case, dest: Path) -> None:
    """Every source array reads equal from ``dest`` (sharded Zarr v3, OME 0.5)."""
    import zarr

    ome: Any = zarr.open_group(str(dest), mode="r", zarr_format=3).attrs["ome"]
    assert ome["version"] == "0.5", ome
    for path in case.paths:
        a = zarr.open_array(str(case.src / path), mode="r", zarr_format=2)
        b: Any = zarr.open_array(str(dest / path), mode="r", zarr_format=3)
        assert b.metadata.codecs[0].to_dict()["name"] == "sharding_indexed", path
        assert np.array_equal(np.asarray(a[...]), np.asarray(b[...])), path


def median(values: list[float]) -> float:
    return statistics.median(values)


def print_table(case: Case, startup: dict[str, Run], markdown: bool) -> None:
    """The medians of ``case`` beside each other, with the ratios asyncshard / resave."""
    header = ("tool", "asked", "s", "CPU s", "peak RSS MB", "objects", "MB in files")
    objects, size = tree_size(case.src)
    rows: list[tuple[str, ...]] = [
        ("source (OME-Zarr 0.4)", "", "", "", "", str(objects), f"{size / MB:.1f}")
    ]
    medians: dict[str, tuple[float, float, float]] = {}
    for tool in TOOLS:
        runs = case.runs[tool]
        if case.failed(tool):
            rows.append((tool, case.asked[tool], "failed", "", "", "", ""))
            continue
        seconds, rss = median([r.seconds for r in runs]), median([r.rss for r in runs])
        cpu = median([r.cpu for r in runs])
        medians[tool] = (seconds, cpu, rss)
        objects, size = case.sizes[tool]
        rows.append((tool, case.asked[tool], f"{seconds:.2f}", f"{cpu:.2f}", f"{rss / MB:.0f}"))
        rows[-1] += (str(objects), f"{size / MB:.1f}")
    if len(medians) == 2:
        mine, peer = medians["asyncshard"], medians["resave"]
        ratios = [f"{a / b:.2f}x" for a, b in zip(mine, peer, strict=True)]
        rows.append(("asyncshard / resave", "", *ratios, "", ""))
    for tool in TOOLS:
        run = startup[tool]
        cells = (f"{run.seconds:.2f}", f"{run.cpu:.2f}", f"{run.rss / MB:.0f}", "", "")
        rows.append((f"{tool} --help", "start-up only, 1 run", *cells))
    print(f"\n{case.name}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        pairs = enumerate(zip(row, widths, strict=True))
        line = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs]
        print("  ".join(line))
    for tool in TOOLS:
        if case.failed(tool):
            print(f"{tool} failed: {case.failed(tool)}")
    if markdown:
        print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=parse_ints, default=(2, 64, 512, 512), help="C,Z,Y,X")
    parser.add_argument(
        "--chunk", type=parse_ints, default=DEFAULT_CHUNK, help="source chunks C,Z,Y,X"
    )
    parser.add_argument("--no-labels", dest="labels", action="store_false", help="the image alone")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; medians (3)")
    parser.add_argument("--shard-bytes", default="64MiB", help="asyncshard --shard-bytes")
    parser.add_argument(
        "-j", "--in-flight", type=int, default=8, help="asyncshard -j, resave --output-threads"
    )
    parser.add_argument(
        "--peer-shards",
        choices=("asyncshard", "whole"),
        default="asyncshard",
        help="resave's shards: asyncshard's shapes, or its default of one per array",
    )
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="resave's venv")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (a temp dir)")
    parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if len(args.shape) != 4 or len(args.chunk) != 4:
        parser.error("--shape and --chunk take C,Z,Y,X")

    cli = ensure_venv(args.venv)
    asyncshard = shutil.which("asyncshard", path=str(Path(sys.executable).parent))
    for key, value in versions(args.venv).items():
        print(f"{key}: {value}")
    print(f"load average before: {load_average()} ({os.cpu_count()} cores)")

    work = Path(tempfile.mkdtemp(prefix="bench-ome-", dir=args.dir))
    try:
        tools = Tools(
            asyncshard=asyncshard or shutil.which("asyncshard") or "asyncshard",
            resave=cli,
            shard_bytes=args.shard_bytes,
            in_flight=args.in_flight,
            peer_shards=args.peer_shards,
            work=work,
        )
        src = work / "src.zarr"
        started = time.perf_counter()
        level0 = write_source(src, args.shape, args.chunk, args.labels)
        chunk = args.chunk
        objects, nbytes = tree_size(src)
        print(
            f"source: OME-Zarr 0.4, c,z,y,x {','.join(map(str, args.shape))} uint16 "
            f"({level0.nbytes / 2**20:.0f} MiB at level 0), chunks {','.join(map(str, chunk))}, "
            f"3 levels{', labels/cells' if args.labels else ''}: {objects} objects, "
            f"{nbytes / MB:.1f} MB (written in {time.perf_counter() - started:.0f} s)"
        )
        name = "image + labels" if args.labels else "image"
        cases = [Case(name, src, array_paths(src), work / "details-0.json")]
        if not tools.prepare(cases[0]) and args.labels:
            bare = work / "image.zarr"
            shutil.copytree(src, bare, ignore=lambda d, _: ["labels"] if Path(d) == src else [])
            cases.append(
                Case("image (labels removed)", bare, array_paths(bare), work / "details-1.json")
            )
            tools.prepare(cases[1])

        startup = {
            "asyncshard": run_child([tools.asyncshard, "shard", "--help"], work / "log"),
            "resave": run_child([str(cli), "resave", "--help"], work / "log"),
        }
        for case in cases:
            print(f"\n{case.name}: shards written (inner chunks as the source's)")
            for path in case.paths:
                shards = {t: s[path][1] for t, s in case.shards.items()}
                print(f"  {path:<16} chunks {case.shards['asyncshard'][path][0]}  shards {shards}")
            for tool in TOOLS:
                print(f"  {tool}: {' '.join(tools.command(case, tool, Path('DEST')))}")

        for round_ in range(args.rounds):
            for case in cases:
                for tool in TOOLS if round_ % 2 == 0 else TOOLS[::-1]:
                    if case.failed(tool):
                        continue  # failed in its untimed run
                    got = tools.run(case, tool)
                    if got.error:
                        raise SystemExit(f"{tool} failed on {case.name}: {got.error}")
                    case.runs.setdefault(tool, []).append(got)
                    print(
                        f"round {round_ + 1} {case.name:<22} {tool:<10} "
                        f"{got.seconds:6.2f} s {got.cpu:6.2f} CPU s {got.rss / MB:6.0f} MB",
                        flush=True,
                    )
                if round_ == args.rounds - 1:  # the last outputs are kept: check them
                    for tool in TOOLS:
                        if not case.failed(tool):
                            verify(case, work / f"{tool}.zarr")
                            case.sizes[tool] = tree_size(work / f"{tool}.zarr")
                            print(f"{case.name}, {tool}: equal to the source: {case.paths}")

        print(f"\nload average after: {load_average()}; medians of {args.rounds} rounds")
        for case in cases:
            print_table(case, startup, args.markdown)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
