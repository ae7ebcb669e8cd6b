"""The CLI against the S3 test server, reached only through ``--endpoint`` and ``-o``: every
case of a command that must fail loudly, or succeed, with its exit code and its message.

No environment variable carries the endpoint or credentials here (they are removed), so
each row also shows that the flags reach the store.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncshard.cli import cli
from tests.convert.helpers import make_array
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.s3 import S3Server

#: Variables that would reach the store besides the flags: none may be set in these tests.
_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass
class Bucket:
    server: S3Server
    prefix: str  # holds a 2-D flat array "arr" and a key "hello"
    empty: str  # holds nothing

    def flags(self) -> list[str]:
        s = self.server
        return [
            "--endpoint", s.endpoint,
            "-o", f"access_key_id={s.access_key}",
            "-o", f"secret_access_key={s.secret_key}",
            "-o", f"region={s.region}",
        ]  # fmt: skip

    def fill(self, tokens: list[str]) -> list[str]:
        names = {
            "{bucket}": self.server.bucket,
            "{prefix}": self.prefix,
            "{empty}": self.empty,
            "{endpoint}": self.server.endpoint,
        }
        out = []
        for token in tokens:
            for name, value in names.items():
                token = token.replace(name, value)
            out.append(token)
        return out


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    root = tmp_path_factory.mktemp("cli")
    make_array(root / "arr", (16, 16), (4, 4), sparse=False)
    prefix = unique_prefix()

    async def upload() -> None:
        async with s3_store_on(s3_server, prefix) as store:
            files = [p for p in root.rglob("*") if p.is_file()]
            await asyncio.gather(
                *(store.set(str(p.relative_to(root)), p.read_bytes()) for p in files),
                store.set("hello", b"hello world"),
            )

    asyncio.run(upload())
    yield Bucket(s3_server, prefix, unique_prefix())


@pytest.fixture(autouse=True)
def no_store_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


S3 = "s3://{bucket}/{prefix}"
MISSING = "s3://no-such-bucket-here/x"

# (arguments, whether the storage flags are added, exit code, text in the output, stdout)
TABLE = [
    # a missing bucket names it, for every command
    (["ls", MISSING], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["ls", "-r", MISSING], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["cat", MISSING, "k"], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["put", MISSING, "k", "-"], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["rm", MISSING, "k"], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["shard", MISSING, "2"], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["unshard", MISSING], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    (["reshard", MISSING, "2"], True, 1, "BucketNotFoundError: ", "no-such-bucket-here"),
    # no array at all is a failure; a shape that does not fit names the array
    (["shard", "s3://{bucket}/{empty}", "2"], True, 1, "NothingToConvertError: ", "no Zarr"),
    (["unshard", "s3://{bucket}/{empty}"], True, 1, "NothingToConvertError: ", "no Zarr"),
    (["reshard", "s3://{bucket}/{empty}", "2"], True, 1, "NothingToConvertError: ", "no Zarr"),
    (["shard", S3, "2,2,2"], True, 1, "ShardShapeError: ", "arr"),
    # every array already in that layout is a success
    (["unshard", S3], True, 0, "", "left as it is (already flat"),
    # a missing slash is not a local path
    (["ls", "s3:/{bucket}/x"], True, 2, "write s3://", "{bucket}/x"),
    (["cat", "s3:{bucket}", "k"], True, 2, "write s3://", "{bucket}"),
    # a missing key in an existing bucket is a missing key
    (["cat", S3, "nope"], True, 1, "no such key: ", "nope"),
    # the flags reach the store, and wrong ones fail before any request
    (["cat", S3, "hello"], True, 0, "", "hello world"),
    (["ls", S3], True, 0, "", "hello"),
    (["ls", S3, "-o", "endpiont=http://x"], True, 2, "UnknownOptionError: ", "endpiont"),
    (["ls", S3, "-o", "max_retries=x"], True, 2, "StoreConfigError: ", "max_retries"),
    (["ls", S3, "-o", "novalue"], True, 2, "KEY=VALUE", "novalue"),
    (["ls", "/tmp", "--endpoint", "http://x"], False, 2, "--endpoint", "s3://"),
    (["ls", "/tmp", "--anon"], False, 2, "--anon", "cloud URLs"),
    # a usage mistake exits 2 in every command: a malformed URL, an unknown scheme, an
    # unknown storage option, a destination inside its source
    *[
        ([*command[:1], url, *command[1:], *extra], bool(extra), 2, kind, text)
        for command in (
            ["ls"],
            ["cat", "k"],
            ["put", "k", "-"],
            ["rm", "k"],
            ["rm", "-r", "-y"],
            ["shard", "2"],
            ["shard", "2", "--to", "/tmp/x"],
            ["unshard"],
            ["reshard", "2"],
            ["verify"],
            ["repair"],
            ["cp", "-r", "/tmp/x"],
            ["serve", "--port", "0"],
        )
        for url, extra, kind, text in (
            ("s3:{bucket}", [], "UnknownSchemeError: ", "write s3://"),
            ("s4://{bucket}/x", [], "UnknownSchemeError: ", "'s4'"),
            (S3, ["-o", "endpiont=http://x"], "UnknownOptionError: ", "endpiont"),
        )
        if not (command[0] == "serve" and "s3:" in url)  # not a URL: serve opens a folder
    ],
    (["shard", S3, "2", "--to", S3 + "/in"], True, 2, "OverlappingStoresError: ", "inside"),
    (["cp", "-r", S3, S3 + "/in"], True, 2, "OverlappingStoresError: ", "overlap"),
    (
        ["ls", S3, "--anon", "--endpoint", "{endpoint}"],
        False,
        1,
        "StorePermissionError: ",
        "skip_signature",
    ),
]


@pytest.mark.parametrize(
    ("args", "flags", "code", "kind", "text"), TABLE, ids=[" ".join(r[0]) for r in TABLE]
)
def test_cli_table(
    bucket: Bucket, args: list[str], flags: bool, code: int, kind: str, text: str
) -> None:
    argv = bucket.fill(args) + (bucket.flags() if flags else [])
    result = CliRunner().invoke(cli, argv, input=b"data")
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    kind, text = bucket.fill([kind, text])
    if code == 0:
        assert text in result.stdout
        return
    if code == 1:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert kind in result.stderr and text in result.stderr, result.stderr


def test_ls_into_a_closed_pipe_ends_quietly(bucket: Bucket, tmp_path: Path) -> None:
    """``asyncshard ls -r s3://... | head -1``: status 1 as coreutils, no error line."""

    async def many() -> None:
        async with s3_store_on(bucket.server, bucket.empty) as store:
            await asyncio.gather(*(store.set(f"key-{i:05d}", b"") for i in range(3000)))

    asyncio.run(many())
    url = f"s3://{bucket.server.bucket}/{bucket.empty}"
    env = {k: v for k, v in os.environ.items() if k not in _ENV}
    command = [sys.executable, "-c", "from asyncshard.cli import main; main()", "ls", "-r"]
    proc = subprocess.Popen(
        [*command, url, *bucket.flags()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"key-00000\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(60) == 1
    assert err == b""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_reaches_the_bucket_through_the_flags(bucket: Bucket, workers: str) -> None:
    """``asyncshard serve s3://... --endpoint ... -o ...``, also in worker processes."""
    from tests.http_app.process import Running

    url = f"s3://{bucket.server.bucket}/{bucket.prefix}"
    server = Running(url, "--quiet", "--workers", workers, *bucket.flags())
    try:
        with urllib.request.urlopen(f"{server.url()}/hello", timeout=30) as answer:
            assert answer.read() == b"hello world"
    finally:
        assert server.stop() == 0


def test_unshard_of_zarr_v2_names_what_can_be_done(bucket: Bucket, tmp_path: Path) -> None:
    """Zarr v2 arrays have no shards: ``unshard`` (which has no ``--to``) says so and names
    the commands that do something with them, not a ``--to`` it does not take."""
    import zarr

    flat = str(tmp_path / "flat.zarr")
    zarr.create_array(flat, shape=(8,), dtype="uint8", chunks=(4,), zarr_format=2)[...] = 1

    async def upload() -> None:
        async with s3_store_on(bucket.server, f"{bucket.empty}/v2") as store:
            for path in (tmp_path / "flat.zarr").rglob("*"):
                if path.is_file():
                    await store.set(
                        str(path.relative_to(tmp_path / "flat.zarr")), path.read_bytes()
                    )

    asyncio.run(upload())
    url = f"s3://{bucket.server.bucket}/{bucket.empty}/v2"
    result = CliRunner().invoke(cli, ["unshard", url, *bucket.flags()])
    assert result.exit_code == 1, result.output
    assert "give --to" not in result.stderr
    assert "Zarr v2 arrays, which have no shards to undo" in result.stderr
    assert "asyncshard shard URL SHAPE --to DEST" in result.stderr
    sharded = CliRunner().invoke(cli, ["shard", url, "2", *bucket.flags()])
    assert sharded.exit_code == 1 and "give --to DEST" in sharded.stderr
