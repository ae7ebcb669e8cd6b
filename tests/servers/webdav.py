"""``rclone serve webdav``: a real WebDAV server, for HTTP stores opened with listing=True.

obstore lists ``http(s)://`` stores with WebDAV ``PROPFIND``; a plain static server
cannot answer that, so the listing side of the HTTP backend is tested against rclone's
WebDAV server over a temporary folder (read-only use: objects are written as files).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers._threaded import free_port, process_stopper, wait_for_port
from tests.servers.s3 import rclone_binary


@dataclass
class WebDAVServer:
    url: str
    root: Path
    _stop: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        for stop in self._stop:
            stop()
        self._stop.clear()


def start_webdav() -> WebDAVServer:
    """rclone's WebDAV server over a temporary folder, with a 1 ms directory cache."""
    base = Path(tempfile.mkdtemp(prefix="asyncshard-webdav-"))
    root = base / "data"
    root.mkdir()
    log = open(base / "rclone.log", "wb")  # noqa: SIM115 - closed in stop
    port = free_port()
    proc = subprocess.Popen(
        [
            rclone_binary(),
            "serve",
            "webdav",
            str(root),
            "--addr",
            f"127.0.0.1:{port}",
            "--dir-cache-time",
            "1ms",
            "--read-only",
            "--config",
            "/dev/null",
            "--log-level",
            "NOTICE",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    stop = process_stopper(proc, log, base)

    try:
        wait_for_port(port, proc_alive=lambda: proc.poll() is None)
    except (RuntimeError, TimeoutError):
        stop()
        raise
    return WebDAVServer(f"http://127.0.0.1:{port}", root, [stop])
