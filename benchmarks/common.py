"""What several benchmarks share: free ports, bounded concurrency, the ``--loop``
option, the Zarr sharding codec of their arrays, and AWS credentials files for
tensorstore's ``s3`` kvstore (no credential chain is asked). nginx: ``nginx.py``."""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def bounded(limit: int, jobs: list[Callable[[], Awaitable[Any]]]) -> None:
    """Run ``jobs`` with at most ``limit`` of them in flight."""
    sem = asyncio.Semaphore(limit)

    async def run(job: Callable[[], Awaitable[Any]]) -> None:
        async with sem:
            await job()

    await asyncio.gather(*(run(j) for j in jobs))


def add_loop_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--loop uvloop|asyncio`` (uvloop by default, as asyncshard's commands)."""
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help=help)


def use_loop(name: str) -> None:
    """Run asyncshard (here and in child processes) on the event loop ``name``."""
    from asyncshard.loops import ENV

    os.environ[ENV] = name


def aws_profile(folder: Path, access_key: str, secret_key: str, region: str) -> dict[str, Any]:
    """Write a ``default`` profile to ``folder`` (credentials and config files); return
    tensorstore's ``aws_credentials`` spec naming it."""
    (folder / "credentials").write_text(
        f"[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret_key}\n"
    )
    (folder / "config").write_text(f"[default]\nregion = {region}\n")
    return {
        "type": "profile",
        "profile": "default",
        "credentials_file": str(folder / "credentials"),
        "config_file": str(folder / "config"),
    }


def sharding_codec(chunk: int, codecs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Zarr v3 ``sharding_indexed`` of 3-d inner chunks of edge ``chunk`` (``codecs``;
    default: uncompressed), with a crc32c index at the end (what tensorstore and
    zarr-python write by default)."""
    index = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
    inner = codecs or [{"name": "bytes"}]
    config = {"chunk_shape": [chunk] * 3, "codecs": inner, "index_codecs": index}
    return {"name": "sharding_indexed", "configuration": {**config, "index_location": "end"}}


def cpu_now() -> float:
    """CPU seconds of every thread of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Timed:
    """``chunks`` read in ``seconds`` of wall time and ``cpu`` seconds of CPU."""

    chunks: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.chunks
