#!/usr/bin/env python
"""Conversion beside its peers, in one run: wall time, MB/s, objects/s, CPU, peak RSS.

Jobs (every one run on a fresh copy of the same input, interleaved over ``--rounds``
rounds, each round starting one tool later so that no tool always runs right after the
same other, median kept; every result is read back and checked before it counts):

* **zarr** — a flat uint8 Zarr v3 array, ``--size``^3 with uncompressed ``--chunk``^3
  chunks (default 512^3 / 32^3: 4,096 objects, 134 MB):

  * shard into ``--shard``^3-chunk shards: asyncshard ``shard_store`` (in place: it
    also deletes the 4,096 old objects) and ``shard_store(..., to=...)`` (a sharded
    copy, like tensorstore's) vs tensorstore copying the array into a sharded array;
  * unshard the sharded array (written by asyncshard, or by tensorstore with
    ``--sharded-by tensorstore``: its shards hold their chunks in C order, asyncshard's
    in Morton order): asyncshard ``unshard_store`` vs tensorstore's copy;
  * reshard ``--shard`` -> ``--reshard``: asyncshard ``reshard`` (to the other
    separator: one pass; and by default, keys kept: two passes) and
    ``reshard(..., to=...)`` (a resharded copy) vs tensorstore's copy;
* **vectors** — a zarr-vectors points store (``--points`` points with a vertex
  attribute on a ``--grid``^3 cell grid; default 6 M points, 36,507 objects, 85 MB):
  asyncshard ``shard_store`` vs zarr-vectors' ``shard_store``, and ``unshard_store``
  vs zarr-vectors' ``unshard_store`` (slow: ``--vectors-unshard-rounds``, default 1);
* ``cp -r`` of each input, as the floor of what touching every object costs.

asyncshard's jobs run on the event loop of its commands (uvloop), or on asyncio's with
``--loop asyncio``. ``--backend local`` uses a folder (``--dir``); ``--backend s3``
serves a folder with ``rclone serve s3`` (tests/servers/s3.py; jobs that read byte
ranges go through the proxy that fixes rclone's ranged answers, for every tool alike)
and runs every tool on its S3 URLs (zarr-vectors through an obstore ``S3Store``);
``cp -r`` stays a local copy of the same files, the floor of the disk below rclone.
``--s3-server seaweedfs`` runs the zarr jobs on SeaweedFS (``weed mini``, the suite's
S3 server) instead: it answers byte ranges as S3 does (rclone answers every range
with the whole object), and inputs are uploaded to it before each run (untimed).

Each measurement runs in a fresh subprocess (imports excluded from wall and CPU; peak
RSS is the child's ``ru_maxrss``). Dirty pages are flushed before each run; the page
cache stays warm. Check ``uptime`` first: the numbers mean something only on a quiet
machine; the load average is printed with the table. From the repository root::

    python benchmarks/bench_convert.py                       # local, defaults of the issue
    python benchmarks/bench_convert.py --backend s3 --jobs zarr
    python benchmarks/bench_convert.py --backend s3 --s3-server seaweedfs --jobs zarr
    python benchmarks/bench_convert.py --size 256 --points 1000000 --grid 12 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers
from benchmarks.common import add_loop_argument, sharding_codec, use_loop

MB = 1e6


# --------------------------------------------------------------------------- inputs


def make_flat(root: Path, size: int, chunk: int) -> None:
    """A flat uint8 array of ``size``^3 with uncompressed ``chunk``^3 chunks."""
    import numpy as np
    import zarr

    arr = zarr.create_array(
        str(root), shape=(size,) * 3, chunks=(chunk,) * 3, dtype="uint8", compressors=None
    )
    rng = np.random.default_rng(0)
    for i in range(0, size, chunk):
        arr[i : i + chunk] = rng.integers(0, 256, (chunk, size, size), dtype=np.uint8)


def make_vectors(root: Path, points: int, grid: int) -> None:
    """A zarr-vectors points store: ``points`` points with a float16 attribute."""
    import numpy as np
    from zarr_vectors.types.points import write_points

    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 100.0 * grid, (points, 3)).astype("float32")
    weight = rng.random(points).astype("float16")
    write_points(str(root), pos, chunk_shape=(100.0,) * 3, vertex_attributes={"w": weight})


def census(root: Path) -> tuple[int, int]:
    """Number of files and bytes below ``root``."""
    n = size = 0
    for folder, _, files in os.walk(root):
        for name in files:
            n += 1
            size += os.path.getsize(os.path.join(folder, name))
    return n, size


def array_digest(url: str, storage: dict[str, Any] | None) -> str:
    """sha256 of the array's values, read by tensorstore (any layout)."""
    import tensorstore as ts

    arr = ts.open(ts_spec(url, storage), read=True).result()
    return hashlib.sha256(arr.read().result().tobytes()).hexdigest()


def vectors_digest(path: str) -> str:
    """sha256 of every point and attribute zarr-vectors reads (sorted: order-free)."""
    import numpy as np
    from zarr_vectors.types.points import read_points

    got = read_points(path, attribute_names=["w"])
    pos = np.asarray(got["positions"])
    rows = np.concatenate([pos, np.asarray(got["vertex_attributes"]["w"], "f4")[:, None]], 1)
    rows = rows[np.lexsort(rows.T[::-1])]
    return hashlib.sha256(rows.tobytes()).hexdigest()


# --------------------------------------------------------------------------- storage


def ts_kvstore(url: str, storage: dict[str, Any] | None) -> dict[str, Any]:
    if not url.startswith("s3://"):
        return {"driver": "file", "path": url}
    assert storage is not None
    bucket, _, path = url.removeprefix("s3://").partition("/")
    return {
        "driver": "s3",
        "bucket": bucket,
        "path": path + "/",
        "endpoint": storage["endpoint"],
        "aws_region": storage["region"],
        "aws_credentials": {"type": "environment"},
    }


def ts_spec(url: str, storage: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {"driver": "zarr3", "kvstore": ts_kvstore(url, storage), **extra}


def sharded_codecs(chunk: int, shard: int | None) -> list[dict[str, Any]]:
    return [{"name": "bytes"}] if shard is None else [sharding_codec(chunk)]


# --------------------------------------------------------------------------- one run (child)


def file_system(path: Path) -> str:
    """The file system holding ``path``: type, mount options and whether it journals
    (an ext4 without a journal discards freed blocks inside each unlink)."""
    best = ("", "?", "")
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            device, point, kind, options = line.split()[:4]
            where = str(path.resolve())
            inside = where == point or where.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, kind, options + f" ({device})")
    point, kind, options = best
    if kind == "ext4":
        device = options.rsplit("(", 1)[-1].rstrip(")").removeprefix("/dev/")
        with contextlib.suppress(OSError):
            journals = os.listdir("/proc/fs/jbd2")
            journaled = any(n.startswith(device + "-") for n in journals)
            kind += ", journaled" if journaled else ", no journal"
    return f"{kind} at {point}: {options}"


def child(job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one job in this (fresh) process; return wall and CPU seconds."""
    import resource

    storage = args.get("storage")
    src, dst = args["src"], args.get("dst")
    run: Callable[[], Any]
    if job.startswith("asyncshard-"):
        from asyncshard.convert import reshard_async, shard_store_async, unshard_store_async

        options: dict[str, Any] = {"storage_options": storage} if storage else {}
        what = job.removeprefix("asyncshard-")
        if what == "shard":
            coro = lambda: shard_store_async(src, args["shard"], **options)  # noqa: E731
        elif what == "shard-to":  # a sharded copy: the source stays (no deletes)
            to = {"to": dst, "to_storage_options": storage}
            coro = lambda: shard_store_async(src, args["shard"], **to, **options)  # noqa: E731
        elif what == "reshard-to":  # a resharded copy: the source stays (no deletes)
            to = {"to": dst, "to_storage_options": storage}
            coro = lambda: reshard_async(src, args["shard"], **to, **options)  # noqa: E731
        elif what == "unshard":
            coro = lambda: unshard_store_async(src, **options)  # noqa: E731
        elif what == "reshard":  # one pass: to the other separator than the input's
            other = "." if args["separator"] == "/" else "/"
            coro = lambda: reshard_async(src, args["shard"], separator=other, **options)  # noqa: E731
        else:  # reshard keeping the keys (the default): two passes
            coro = lambda: reshard_async(src, args["shard"], **options)  # noqa: E731
        from asyncshard import loops

        loops.loop_factory()  # imports the loop (uvloop: 25 ms) before the clock starts
        run = lambda: loops.run(coro())  # noqa: E731  # the loop of asyncshard's commands
    elif job == "tensorstore":
        import tensorstore as ts

        context = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        source = ts.open(ts_spec(src, storage), read=True, context=context).result()
        shape = list(source.shape)
        target_shape = args["chunk"] * (args["shard"] or 1)
        metadata = {
            "shape": shape,
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [target_shape] * 3}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": sharded_codecs(args["chunk"], args["shard"]),
            "fill_value": 0,
        }

        def run() -> None:
            spec = ts_spec(dst, storage, metadata=metadata)
            target = ts.open(spec, create=True, context=context).result()
            target.write(source).result()

    elif job.startswith("zarr-vectors-"):
        from zarr_vectors import sharding

        where: Any = src
        if src.startswith("s3://"):  # zarr-vectors takes an obstore store
            from obstore.store import S3Store

            bucket, _, prefix = src.removeprefix("s3://").partition("/")
            where = S3Store(
                bucket,
                prefix=prefix,
                endpoint=storage["endpoint"],
                access_key_id=storage["access_key_id"],
                secret_access_key=storage["secret_access_key"],
                region=storage["region"],
                client_options={"allow_http": True},
            )
        if job == "zarr-vectors-shard":
            run = lambda: sharding.shard_store(where, shard_shape=args["shard"])  # noqa: E731
        else:
            run = lambda: sharding.unshard_store(where)  # noqa: E731
    else:
        raise SystemExit(f"unknown job {job}")
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "s": seconds,
        "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime,
        "rss": peak_rss(),
    }


def peak_rss() -> int:
    """This process's peak resident set (``VmHWM``: since its exec, unlike ``ru_maxrss``,
    which keeps the forking parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def spawn(argv: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, Any], Any]:
    """Run ``argv``; return its JSON answer (or its wall time) and its rusage."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if argv[0] == "cp" and not proc.returncode:
        seconds = time.perf_counter() - started
        return {"s": seconds, "user": usage.ru_utime, "sys": usage.ru_stime, "rss": 0}, usage
    lines = out.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"{argv[:4]} failed with status {proc.returncode}")
    answer: dict[str, Any] = json.loads(lines[-1])
    if proc.returncode:  # finished its job (checked afterwards), then died while exiting
        answer["exit"] = proc.returncode
    return answer, usage


# --------------------------------------------------------------------------- the driver


@dataclass
class Result:
    """The runs of one tool on one job."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    failure: str = ""  # a peer's result that did not read back (reported, not hidden)

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.runs)


@dataclass
class Job:
    """One conversion, run by several tools on copies of one input."""

    name: str
    input: Path  # the pristine input (local folder)
    objects: int
    nbytes: int
    check: Callable[[Path, str], None]  # (local folder, URL) of the result
    tools: dict[str, Callable[[Path], list[str]]]  # tool -> argv builder (given a scratch dir)
    rounds: int
    results: dict[str, Result] = field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.s3: Any = None
        self.proxy: Any = None
        self.uploads = args.s3_server == "seaweedfs" and args.backend == "s3"
        self.env = dict(os.environ)

    # -- where copies live -----------------------------------------------------------

    @contextlib.contextmanager
    def backend(self) -> Iterator[None]:
        if self.args.backend != "s3":
            yield
            return
        from tests.servers.proxy import FaultProxy
        from tests.servers.s3 import start_rclone
        from tests.servers.seaweedfs import start_seaweedfs

        if self.uploads:
            self.s3 = start_seaweedfs()
            self.proxy = None  # it answers ranges as S3 does
        else:
            self.s3 = start_rclone()
            self.proxy = FaultProxy(self.s3.endpoint, fix_ranged_200=True).start()
        credentials = {
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
            "AWS_REGION": self.s3.region,
        }
        self.env.update(credentials)
        os.environ.update(credentials)  # tensorstore reads results back in this process
        try:
            yield
        finally:
            if self.proxy is not None:
                self.proxy.stop()
            self.s3.stop()

    def scratch(self, name: str) -> tuple[Path, str]:
        """A fresh folder and the URL tools use for it (S3 or the path)."""
        if self.s3 is None:
            path = self.work / "runs" / name
            return path, str(path)
        if self.uploads:  # a local folder of the same name marks the place
            return self.work / "runs" / name, f"s3://{self.s3.bucket}/runs/{name}"
        path = Path(self.s3.root) / self.s3.bucket / "runs" / name
        return path, f"s3://{self.s3.bucket}/runs/{name}"

    def place(self, source: Path, scratch: Path) -> str:
        """Copy an input to a run's scratch place (untimed); the URL of the copy."""
        url = self.scratch(scratch.name)[1]
        if not self.uploads:
            shutil.copytree(source, scratch)
            return url
        files = [p for p in source.rglob("*") if p.is_file()]
        items = [(p.relative_to(source).as_posix(), p.read_bytes()) for p in files]
        on_s3(url, self.storage(False), lambda store: store.set_many(items))
        return url

    def clear(self, scratch: Path) -> None:
        """Remove every run's copies (local folders, and uploads)."""
        shutil.rmtree(scratch.parent, ignore_errors=True)
        if self.uploads:
            url = f"s3://{self.s3.bucket}/runs"
            on_s3(url, self.storage(False), lambda store: store.erase_prefix(""))

    def storage(self, ranged: bool) -> dict[str, Any] | None:
        if self.s3 is None:
            return None
        if self.proxy is None:  # SeaweedFS: ranges and conditional writes as on S3
            return self.s3.options()
        endpoint = self.proxy.url if ranged else self.s3.endpoint
        return {**self.s3.options(endpoint=endpoint), "conditional_writes": False}

    # -- running ---------------------------------------------------------------------

    def measure(self, job: Job, tool: str, n: int) -> None:
        scratch, url = self.scratch(f"{job.name}-{tool}-{n}".replace(" ", "_").replace(",", ""))
        self.clear(scratch)
        scratch.parent.mkdir(parents=True)
        argv = job.tools[tool](scratch)
        os.sync()
        out, _ = spawn(argv, self.env)
        job.results.setdefault(tool, Result()).runs.append(out)
        if tool != "cp -r":
            out = "-out" if "tensorstore" in tool or "--to" in tool else ""
            try:
                job.check(scratch.with_name(scratch.name + out), url + out)
            except Exception as exc:
                if tool.startswith("asyncshard"):
                    raise
                job.results[tool].failure = f"{type(exc).__name__}: {str(exc)[:120]}"
        self.clear(scratch)

    def run(self, jobs: list[Job]) -> None:
        for n in range(max(j.rounds for j in jobs)):
            for job in jobs:
                if n >= job.rounds:
                    continue
                tools = list(job.tools)  # each round starts one tool later: no seat
                for tool in tools[n % len(tools) :] + tools[: n % len(tools)]:
                    self.measure(job, tool, n)
                    print(
                        f"  round {n + 1}: {job.name} / {tool}: "
                        f"{job.results[tool].runs[-1]['s']:.2f} s",
                        file=sys.stderr,
                    )


def on_s3(url: str, storage: dict[str, Any], job: Callable[[Any], Awaitable[Any]]) -> None:
    """Run ``job`` on an asyncshard store of ``url`` (uploads and cleanups, untimed)."""
    from asyncshard import loops, open_store

    async def run() -> None:
        async with open_store(url, **storage) as store:
            await job(store)

    loops.run(run())


def child_argv(job: str, **args: Any) -> list[str]:
    return [sys.executable, __file__, "--child", job, json.dumps(args)]


def rss_text(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f}" if nbytes else "-"


def report(jobs: list[Job], header: str) -> None:
    load = os.getloadavg()
    print(f"\n{header}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        "| job | tool | wall s | MB/s | objects/s | CPU s (user+sys) | peak RSS MB "
        "| asyncshard speed / tool |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for job in jobs:
        ours = [t for t in job.results if t.startswith("asyncshard")]
        base = job.results[ours[0]].median("s") if ours else None
        for tool, res in job.results.items():
            wall = res.median("s")
            cpu = res.median("user") + res.median("sys")
            ratio = "" if base is None or tool in ours else f"{wall / base:.2f}x"
            if res.failure:
                ratio += f" (its result does not read back: {res.failure})"
            exits = [r["exit"] for r in res.runs if "exit" in r]
            if exits:
                ratio += f" ({len(exits)} of {len(res.runs)} runs exited with status {exits[0]})"
            print(
                f"| {job.name} | {tool} | {wall:.2f} | {job.nbytes / wall / MB:.0f} | "
                f"{job.objects / wall:,.0f} | {cpu:.2f} | {rss_text(res.median('rss'))} | "
                f"{ratio} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["local", "s3"], default="local")
    parser.add_argument(
        "--s3-server",
        choices=["rclone", "seaweedfs"],
        default="rclone",
        help="the S3 server of --backend s3 (seaweedfs: zarr jobs only)",
    )
    parser.add_argument("--jobs", default="zarr,vectors", help="zarr, vectors (comma list)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=512, help="array edge (512)")
    parser.add_argument("--chunk", type=int, default=32, help="chunk edge (32)")
    parser.add_argument("--shard", type=int, default=8, help="chunks per shard per axis (8)")
    parser.add_argument("--reshard", type=int, default=4, help="reshard to this (4)")
    parser.add_argument(
        "--sharded-by",
        choices=["asyncshard", "tensorstore"],
        default="asyncshard",
        help="who writes the sharded input of unshard and reshard: asyncshard (inner "
        "chunks in Morton order, '.' keys) or tensorstore (C order, '/' keys)",
    )
    parser.add_argument("--points", type=int, default=6_000_000)
    parser.add_argument("--grid", type=int, default=23, help="cells per axis (23)")
    parser.add_argument("--vectors-shard", type=int, default=8)
    parser.add_argument("--vectors-unshard-rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (a temp dir)")
    add_loop_argument(parser, "asyncshard's event loop")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # on the loop the parent's environment names
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return
    use_loop(args.loop)  # the children inherit it
    if args.backend == "s3" and args.s3_server == "seaweedfs" and "vectors" in args.jobs:
        parser.error("--s3-server seaweedfs runs the zarr jobs only (--jobs zarr)")

    work = Path(tempfile.mkdtemp(prefix="bench-convert-", dir=args.dir))
    bench = Bench(args, work)
    try:
        with bench.backend():
            jobs = build_jobs(bench, args, work)
            bench.run(jobs)
            where = f"; {file_system(work)}" if args.backend == "local" else ""
            report(jobs, f"{args.backend} backend, median of {args.rounds} rounds{where}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def vector_tools(
    bench: Bench, source: Path, what: str, shard: int
) -> dict[str, Callable[[Path], list[str]]]:
    """asyncshard (on the backend), zarr-vectors (local files) and ``cp -r``."""
    storage = bench.storage(True)  # zarr-vectors reads ranges on S3, whatever it does

    def run(tool: str) -> Callable[[Path], list[str]]:
        def argv(scratch: Path) -> list[str]:
            shutil.copytree(source, scratch)
            url = bench.scratch(scratch.name)[1]
            return child_argv(f"{tool}-{what}", src=url, shard=shard, storage=storage)

        return argv

    return {
        f"asyncshard {what}": run("asyncshard"),
        f"zarr-vectors {what}_store": run("zarr-vectors"),
        "cp -r": lambda scratch: ["cp", "-r", str(source), str(scratch)],
    }


def build_jobs(bench: Bench, args: argparse.Namespace, work: Path) -> list[Job]:
    """Write the inputs once and describe every job."""
    inputs = work / "inputs"
    inputs.mkdir()
    jobs: list[Job] = []
    names = set(args.jobs.split(","))

    def copy_to(src: Path) -> Callable[[Path], str]:
        """Copy the input to a run's scratch place (untimed); the URL of the copy."""

        def do(scratch: Path) -> str:
            return bench.place(src, scratch)

        return do

    if "zarr" in names:
        flat, sharded = inputs / "flat", inputs / "sharded"
        sizes = {"shard": args.shard, "chunk": args.chunk}
        kept = "/" if args.sharded_by == "tensorstore" else "."  # the input's separator
        make_flat(flat, args.size, args.chunk)
        if args.sharded_by == "tensorstore":  # inner chunks in C order, "/" keys
            child("tensorstore", {"src": str(flat), "dst": str(sharded), **sizes})
        else:  # inner chunks in Morton order, "." keys
            shutil.copytree(flat, sharded)
            from asyncshard.convert import shard_store

            shard_store(str(sharded), args.shard, separator=".", manifest=False)
        objects, nbytes = census(flat)
        array_sha = array_digest(str(flat), None)
        print(
            f"zarr: {args.size}^3 uint8, {objects} flat objects, {nbytes / MB:.0f} MB",
            file=sys.stderr,
        )

        def check(path: Path, url: str) -> None:
            ranged = bench.storage(True)
            if array_digest(url, ranged) != array_sha:
                raise AssertionError(f"{url}: values differ after the conversion")

        for name, source, what, shard in (
            ("zarr shard", flat, "shard", args.shard),
            ("zarr unshard", sharded, "unshard", None),
            ("zarr reshard", sharded, "reshard", args.reshard),
        ):
            ranged = bench.storage(what != "shard")
            prepare = copy_to(source)

            def ours(
                job: str, prepare: Any = prepare, shard: Any = shard, ranged: Any = ranged
            ) -> Callable[[Path], list[str]]:
                return lambda scratch: child_argv(
                    job, src=prepare(scratch), shard=shard, storage=ranged, separator=kept
                )

            def copying(
                prepare: Any, shard: Any, ranged: Any, job: str = "tensorstore"
            ) -> Callable[[Path], list[str]]:
                """A tool that writes the result next to the input (``-out``)."""

                def argv(scratch: Path) -> list[str]:
                    url = prepare(scratch)
                    return child_argv(
                        job,
                        src=url,
                        dst=url + "-out",
                        shard=shard,
                        chunk=args.chunk,
                        storage=ranged,
                    )

                return argv

            def theirs(
                prepare: Any = prepare, shard: Any = shard, ranged: Any = ranged
            ) -> Callable[[Path], list[str]]:
                return copying(prepare, shard, ranged)

            tools = {f"asyncshard {what}": ours(f"asyncshard-{what}")}
            if what == "shard":
                tools["asyncshard shard --to (a copy)"] = copying(
                    prepare, shard, ranged, "asyncshard-shard-to"
                )
            if what == "reshard":
                tools["asyncshard reshard, keys kept (2 passes)"] = ours("asyncshard-reshard2")
                tools["asyncshard reshard --to (a copy)"] = copying(
                    prepare, shard, ranged, "asyncshard-reshard-to"
                )
            tools["tensorstore copy"] = theirs()
            tools["cp -r"] = lambda scratch, s=source: ["cp", "-r", str(s), str(scratch)]
            jobs.append(Job(name, source, objects, nbytes, check, tools, args.rounds))

    if "vectors" in names:
        zv, zv_sharded = inputs / "zv", inputs / "zv-sharded"
        make_vectors(zv, args.points, args.grid)
        shutil.copytree(zv, zv_sharded)
        from zarr_vectors.sharding import shard_store as zv_shard

        zv_shard(str(zv_sharded), shard_shape=args.vectors_shard)
        objects, nbytes = census(zv)
        points_sha = vectors_digest(str(zv))
        print(
            f"vectors: {args.points} points, {objects} objects, {nbytes / MB:.0f} MB",
            file=sys.stderr,
        )

        def check_zv(path: Path, url: str) -> None:
            if vectors_digest(str(path)) != points_sha:
                raise AssertionError(f"{url}: zarr-vectors reads other points")

        for name, source, what, rounds in (
            ("zarr-vectors shard", zv, "shard", args.rounds),
            ("zarr-vectors unshard", zv_sharded, "unshard", args.vectors_unshard_rounds),
        ):
            tools = vector_tools(bench, source, what, args.vectors_shard)
            jobs.append(Job(name, source, objects, nbytes, check_zv, tools, rounds))
    return jobs


if __name__ == "__main__":
    main()
