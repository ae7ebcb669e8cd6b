"""cp's error paths as a new user meets them, against SeaweedFS: each is one line with
the right exit status (2 usage, 1 failure, 130 Ctrl-C), never a traceback, never a
silent success."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncshard.cli import cli
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.http_static import StaticServer
from tests.servers.s3 import TEST_BUCKET, S3Server
from tests.transfer.conftest import write_tree
from tests.transfer.test_cp_servers import SRC, contents, s3_flags


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_missing_object_is_one_line_naming_it(s3_server: S3Server, tmp_path: Path) -> None:
    url = f"s3://{s3_server.bucket}/{unique_prefix()}/nokey"
    code, out, err = run("cp", url, str(tmp_path / "x"), *s3_flags(s3_server))
    assert code == 1
    assert out == ""  # no "0 objects copied" summary for one object
    assert err.strip().splitlines() == [f"Error: NothingToCopyError: no such object: {url}"]


def test_a_missing_bucket_is_named_and_exits_1(s3_server: S3Server, tmp_path: Path) -> None:
    for args in (["cp", "s3://no-such-bucket/a/key"], ["cp", "-r", "s3://no-such-bucket/a"]):
        code, out, err = run(*args, str(tmp_path / "x"), *s3_flags(s3_server))
        assert code == 1, err  # a failure, as for ls, cat, put, rm and shard
        assert out == ""
        assert len(err.strip().splitlines()) == 1
        assert "BucketNotFoundError" in err and "'no-such-bucket'" in err


def test_a_url_missing_its_slashes_is_a_usage_error_with_any_flags(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tree(tmp_path / "src", {"f": b"1"})
    monkeypatch.chdir(tmp_path)
    for args in (
        ["cp", "-r", "src", f"s3:{s3_server.bucket}/x", *s3_flags(s3_server)],
        ["cp", "-r", f"s3:/{s3_server.bucket}/x", "dst", "--endpoint", s3_server.endpoint],
        ["cp", "src/f", "s3:x"],  # one object: no local file named s3:x appears
    ):
        code, _, err = run(*args)
        assert code == 2, err
        assert "is not a URL: write s3://" in err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_cp_r_of_a_file_and_sizes_of_zero_are_usage_errors(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"f": b"1"})
    code, _, err = run("cp", "-r", str(tmp_path / "src/f"), str(tmp_path / "d"))
    assert code == 2 and "is a file: copy it without -r" in err
    for flag in ("--part-size", "--max-buffer"):
        code, _, err = run("cp", "-r", flag, "0", str(tmp_path / "src"), str(tmp_path / "d"))
        assert code == 2 and f"Invalid value for {flag}" in err
    assert not (tmp_path / "d").exists()


def test_the_summary_counts_bytes_in_the_units_conversions_use(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"a": b"x" * 87142, "b": b"y"})
    code, out, _ = run("cp", "-r", str(tmp_path / "src"), str(tmp_path / "d"))
    assert code == 0
    assert out.strip() == "2 objects copied (87.1 kB), 0 already equal"


async def test_ctrl_c_says_how_to_finish_and_a_rerun_does(
    s3_server: S3Server, tmp_path: Path
) -> None:
    files = write_tree(tmp_path / "src", {f"k/{i:04d}": os.urandom(1500) for i in range(400)})
    prefix = unique_prefix()
    url = f"s3://{s3_server.bucket}/{prefix}"
    command = [sys.executable, "-m", "asyncshard", "cp", "-r", "--progress"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"}
    proc = subprocess.Popen(
        [*command, str(tmp_path / "src"), url, *s3_flags(s3_server)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    seen = b""
    # the bar counting copied objects: the copy is under way (not the bar's first
    # drawing, from inside tqdm's constructor: a Ctrl-C there is tqdm's to survive)
    while not re.search(rb"[1-9][0-9]* objects", seen):
        seen = seen[-64:] + proc.stderr.read1(4096)
        assert proc.poll() is None and time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert b"interrupted" in err and b"run the same command again" in err
    assert out == b""
    rerun = subprocess.run(
        [*command, str(tmp_path / "src"), url, *s3_flags(s3_server)],
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert await contents(s3_store_on(s3_server, prefix)) == files


def test_the_readme_copy_to_gcs_runs_as_written(
    s3_server: S3Server, gcs_fake: FakeGCS, tmp_path: Path
) -> None:
    """The README's S3 -> GCS line, with its names replaced by the test servers'."""
    readme = (Path(SRC).parent / "README.md").read_text()
    start = "asyncshard cp -r s3://bucket/a gs://"
    [line] = [ln for ln in readme.splitlines() if ln.startswith(start)]
    key_file = tmp_path / "key.json"
    key_file.write_text(service_account_key(gcs_fake.url))
    prefix = unique_prefix()
    asyncio.run(s3_store_on(s3_server, prefix).set("a/zarr.json", b"{}"))
    args = line.split("#")[0].split()[1:]
    args = [
        arg.replace("s3://bucket/", f"s3://{s3_server.bucket}/{prefix}/")
        .replace("gs://other/", f"gs://{TEST_BUCKET}/{prefix}/")
        .replace("key.json", str(key_file))
        for arg in args
    ]
    code, out, err = run(*args, *s3_flags(s3_server), "--to-endpoint", gcs_fake.url)
    assert code == 0, err
    assert out.startswith("1 object copied")


def test_a_read_only_destination_is_refused_once_before_any_request(
    http_server: StaticServer, tmp_path: Path
) -> None:
    write_tree(tmp_path / "src", {f"k{i}": b"1" for i in range(5)})
    url = f"{http_server.url}/{unique_prefix()}"
    for args in (["cp", "-r", str(tmp_path / "src"), url], ["cp", str(tmp_path / "src/k0"), url]):
        code, out, err = run(*args)
        assert code == 2, err
        assert out == ""
        assert err.strip().splitlines() == [
            f"Error: ReadOnlyError: cannot copy into {url}: it is read-only"
        ]
