"""nginx as the static backend of client benchmarks (a Python server would be what a
client benchmark measures): a throwaway configuration with its own prefix, ``daemon
off``, byte ranges, and an access log that counts requests.

    with Nginx(root) as server:
        url = server.url            # http://127.0.0.1:<port>
        n = server.requests()       # requests answered so far

``ensure_nginx()`` installs Debian's ``nginx-light`` with apt-get when it is missing and
we are root; otherwise it raises, saying what is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from benchmarks.common import free_port
from tests.servers import debian

CONFIG = """
{user}
worker_processes {workers};
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format brief '$request_method $uri $http_range $status';
    access_log {prefix}/access.log brief;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    types {{ }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ autoindex on; }}
    }}
}}
"""


def ensure_nginx() -> str:
    """The nginx binary, apt-installed (``nginx-light``) if missing and possible."""
    try:
        return debian.ensure("nginx-light", ("nginx",))
    except RuntimeError as exc:
        raise SystemExit(f"this benchmark needs nginx: {exc}") from None


class Nginx:
    """nginx serving ``root`` on 127.0.0.1 (its own process, ``workers`` workers)."""

    def __init__(self, root: str | Path, *, workers: int = 1) -> None:
        self.root = Path(root).resolve()
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._prefix = Path(tempfile.mkdtemp(prefix="asyncshard-nginx-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Nginx:
        binary = ensure_nginx()
        conf = self._prefix / "nginx.conf"
        conf.write_text(
            CONFIG.format(
                prefix=self._prefix,
                port=self.port,
                root=self.root,
                workers=self.workers,
                # as root, workers would run as nobody and could not read private folders
                user="user root;" if os.geteuid() == 0 else "",
            )
        )
        self._proc = subprocess.Popen([binary, "-p", str(self._prefix), "-c", str(conf)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.02)
        self.__exit__(None, None, None)
        log = self._prefix / "error.log"
        raise RuntimeError("nginx did not start: " + (log.read_text() if log.exists() else ""))

    @property
    def pid(self) -> int:
        """The nginx master's process id (its workers are its children)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

    def requests(self) -> int:
        """Requests answered so far (lines of the access log; nginx writes them at once)."""
        log = self._prefix / "access.log"
        return log.read_bytes().count(b"\n") if log.exists() else 0

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        shutil.rmtree(self._prefix, ignore_errors=True)
