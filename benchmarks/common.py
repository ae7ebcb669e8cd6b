"""What several benchmarks share: free ports, bounded concurrency, an nginx config, and
AWS credentials files for tensorstore's ``s3`` kvstore (no credential chain is asked)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

NGINX_CONF = """
daemon off;
worker_processes 1;
error_log stderr error;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log {access_log};
    log_not_found off;
    client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
    uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
    sendfile on;
    keepalive_requests 1000000;
    server {{ listen 127.0.0.1:{port}; root {root}; }}
}}
"""


def nginx_conf(tmp: Path, port: int, root: Path, access_log: Path | None = None) -> str:
    """A throwaway nginx config: one worker, its own prefix ``tmp``, serving ``root`` on
    ``port``; requests are logged to ``access_log`` (to count them) or not at all."""
    log = "off" if access_log is None else str(access_log)
    return NGINX_CONF.format(tmp=tmp, port=port, root=root, access_log=log)


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
