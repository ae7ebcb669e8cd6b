"""cp -r against real servers: SeaweedFS (S3) and the GCS fake, through the library,
click's CliRunner and real processes (exit statuses, kill -9 and resume)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import asyncshard
from asyncshard import CopyError, LocalStore, UnsupportedOperationError, copy_tree_async
from asyncshard.backends.cloud.streams import STREAM_PART_SIZE
from asyncshard.cli import cli
from asyncshard.store import Store
from tests.servers.fixtures import gcs_store_on, s3_store_on, unique_prefix
from tests.servers.gcs_fake import FakeGCS
from tests.servers.http_static import StaticServer
from tests.servers.s3 import S3Server
from tests.transfer.conftest import read_tree, write_tree

SRC = str(Path(asyncshard.__file__).resolve().parents[1])


async def contents(store: Store) -> dict[str, bytes]:
    out = {}
    async for key in store.list():
        data = await store.get(key)
        assert data is not None
        out[key] = bytes(data)
    return out


def s3_flags(server: S3Server) -> list[str]:
    return [
        "--endpoint",
        server.endpoint,
        "-o",
        f"access_key_id={server.access_key}",
        "-o",
        f"secret_access_key={server.secret_key}",
        "-o",
        f"region={server.region}",
    ]


async def test_local_to_s3_to_local_then_skips_equal(
    s3_server: S3Server, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    s3 = s3_store_on(s3_server, unique_prefix())
    up = await copy_tree_async(tmp_path / "src", s3, part_size=1 << 20)
    assert up.copied == len(tree)
    assert await contents(s3) == tree
    down = await copy_tree_async(s3, tmp_path / "back", part_size=1 << 20)
    assert down.copied == len(tree)
    assert read_tree(tmp_path / "back") == tree
    # again, both ways: nothing written (the MD5 ETags against the local bytes)
    s3.stats.requests.clear()
    again = await copy_tree_async(tmp_path / "src", s3, part_size=1 << 20)
    assert (again.copied, again.skipped) == (0, len(tree))
    assert s3.stats.requests["put"] == 0
    assert s3.stats.requests["get"] == 0  # the S3 side is never downloaded to compare
    back = LocalStore(tmp_path / "back")
    again = await copy_tree_async(s3, back, part_size=1 << 20)
    assert (again.copied, again.skipped) == (0, len(tree))
    assert back.stats.requests["put"] == 0


async def test_a_changed_object_of_equal_size_is_not_skipped(
    s3_server: S3Server, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    s3 = s3_store_on(s3_server, unique_prefix())
    await copy_tree_async(tmp_path / "src", s3)
    write_tree(tmp_path / "src", {"c/5": b"y" * 4096})
    summary = await copy_tree_async(tmp_path / "src", s3)
    assert (summary.copied, summary.skipped) == (1, len(tree) - 1)
    assert await s3.get("c/5") == b"y" * 4096
    # and the other way: the local copy changed at equal size is restored
    await copy_tree_async(s3, tmp_path / "back")
    write_tree(tmp_path / "back", {"a/b/7.bin": b"z" * len(tree["a/b/7.bin"])})
    summary = await copy_tree_async(s3, tmp_path / "back")
    assert summary.copied == 1
    assert (tmp_path / "back/a/b/7.bin").read_bytes() == tree["a/b/7.bin"]


async def test_large_objects_go_up_in_parts_and_are_skipped_by_their_multipart_etag(
    s3_server: S3Server, tmp_path: Path
) -> None:
    blob = os.urandom(2 * STREAM_PART_SIZE + 12345)
    write_tree(tmp_path / "src", {"large": blob, "small": b"s"})
    s3 = s3_store_on(s3_server, unique_prefix())
    summary = await copy_tree_async(tmp_path / "src", s3, part_size=1 << 20)
    assert summary.copied == 2
    assert await s3.get("large") == blob
    assert s3.stats.requests["put"] == 1 + 1 + 3 + 1  # small; start, 3 parts, complete
    meta = await s3.head("large")
    assert meta is not None and meta.version is not None and "-3" in meta.version
    s3.stats.requests.clear()
    again = await copy_tree_async(tmp_path / "src", s3, part_size=1 << 20)
    assert again.skipped == 2
    assert (s3.stats.requests["put"], s3.stats.requests["get"]) == (0, 0)


async def test_s3_to_gcs_and_back_to_s3(
    s3_server: S3Server, gcs_fake: FakeGCS, tmp_path: Path
) -> None:
    files = write_tree(tmp_path / "src", {f"d/{i}": os.urandom(i * 37) for i in range(30)})
    s3 = s3_store_on(s3_server, unique_prefix())
    await copy_tree_async(tmp_path / "src", s3)
    gcs = gcs_store_on(gcs_fake, unique_prefix())
    assert (await copy_tree_async(s3, gcs)).copied == len(files)
    assert await contents(gcs) == files
    gcs.stats.requests.clear()
    s3.stats.requests.clear()
    again = await copy_tree_async(s3, gcs)  # both MD5 ETags: no object read, none written
    assert again.skipped == len(files)
    assert gcs.stats.requests["put"] == 0
    assert gcs.stats.requests["get"] == s3.stats.requests["get"] == 0
    back = s3_store_on(s3_server, unique_prefix())
    assert (await copy_tree_async(gcs, back)).copied == len(files)
    assert await contents(back) == files


def test_cp_r_cli_uploads_then_skips_and_rm_r_asks(
    s3_server: S3Server, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    url = f"s3://{s3_server.bucket}/{unique_prefix()}/tree"
    runner = CliRunner()
    result = runner.invoke(cli, ["cp", "-r", str(tmp_path / "src"), url, *s3_flags(s3_server)])
    assert result.exit_code == 0, result.output
    assert f"{len(tree)} objects copied" in result.output
    result = runner.invoke(cli, ["cp", "-r", str(tmp_path / "src"), url, *s3_flags(s3_server)])
    assert result.exit_code == 0, result.output
    assert f"0 objects copied (0 B), {len(tree)} already equal" in result.output
    # rm -r off a terminal refuses without -y, and deletes nothing
    result = runner.invoke(cli, ["rm", "-r", url, *s3_flags(s3_server)])
    assert result.exit_code == 2
    assert "-y" in result.output
    result = runner.invoke(cli, ["ls", "-r", url, *s3_flags(s3_server)])
    assert len(result.output.splitlines()) == len(tree)
    result = runner.invoke(cli, ["rm", "-r", "-y", url, "a", *s3_flags(s3_server)])
    assert result.exit_code == 0, result.output
    assert "removed 40 objects" in result.output
    result = runner.invoke(cli, ["rm", "-r", "--yes", url, *s3_flags(s3_server)])
    assert f"removed {len(tree) - 40} objects" in result.output
    result = runner.invoke(cli, ["ls", "-r", url, *s3_flags(s3_server)])
    assert result.exit_code == 1  # nothing left
    # rm -r of nothing (a typo, or done already) is no silent success
    for where in (url, f"{url}o"):
        result = runner.invoke(cli, ["rm", "-r", "-y", where, *s3_flags(s3_server)])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr == f"Error: nothing at {where}: no such folder, or an empty one\n"
    result = runner.invoke(cli, ["cp", "-r", url, str(tmp_path / "x"), *s3_flags(s3_server)])
    assert result.exit_code == 1
    assert "NothingToCopyError" in result.output


def _cp_process(src: str, dst: str, server: S3Server, *extra: str) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"}
    return subprocess.Popen(
        [sys.executable, "-m", "asyncshard", "cp", "-r", src, dst, *s3_flags(server), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_a_copy_killed_mid_way_leaves_no_partial_object_and_resumes(
    s3_server: S3Server, tmp_path: Path
) -> None:
    files = {f"small/{i:04d}": os.urandom(2000) for i in range(600)}
    files |= {f"large/{i}": os.urandom(3 * STREAM_PART_SIZE) for i in range(4)}
    write_tree(tmp_path / "src", files)
    prefix = unique_prefix()
    url = f"s3://{s3_server.bucket}/{prefix}"
    s3 = s3_store_on(s3_server, prefix)
    proc = _cp_process(str(tmp_path / "src"), url, s3_server, "--max-buffer", "64M")
    try:
        deadline = time.monotonic() + 60
        while len([k async for k in s3.list()]) < 50:  # mid-way: some objects are there
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    there = await contents(s3)
    assert 0 < len(there) < len(files), "not killed mid-way"
    assert all(files[k] == v for k, v in there.items())  # every visible object whole
    rerun = _cp_process(str(tmp_path / "src"), url, s3_server)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    # (requests sent before the kill may still land after the listing above)
    words = out.decode().split()
    copied, skipped = int(words[0]), int(words[words.index("already") - 1])
    assert copied + skipped == len(files)
    assert skipped >= len(there)
    assert await contents(s3) == files


async def test_a_failure_exits_nonzero_naming_the_key(s3_server: S3Server, tmp_path: Path) -> None:
    prefix = unique_prefix()
    s3 = s3_store_on(s3_server, prefix)
    await s3.set_many([("ok/1", b"1"), ("blocked/x", b"2"), ("ok/2", b"3")])
    write_tree(tmp_path / "dst", {"blocked": b"a file where a folder must go"})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncshard",
            "cp",
            "-r",
            f"s3://{s3_server.bucket}/{prefix}",
            str(tmp_path / "dst"),
            *s3_flags(s3_server),
        ],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert b"2 objects copied" in proc.stdout
    assert b"1 failed" in proc.stdout
    assert b"blocked/x" in proc.stderr
    assert b"Traceback" not in proc.stderr
    assert (tmp_path / "dst/ok/2").read_bytes() == b"3"


async def test_an_object_gone_from_the_source_fails_the_copy(
    s3_server: S3Server, tmp_path: Path
) -> None:
    s3 = s3_store_on(s3_server, unique_prefix())
    await s3.set("here", b"1")
    with pytest.raises(CopyError) as raised:
        await copy_tree_async(s3, tmp_path / "dst", keys=["here", "gone"])
    assert raised.value.summary.copied == 1
    assert [k for k, _ in raised.value.summary.failures] == ["gone"]


async def test_an_http_source_copies_given_keys_and_refuses_to_list(
    http_server: StaticServer, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    files = write_tree(http_server.root / prefix, {"zarr.json": b"{}", "c/0/0": b"chunk"})
    url = f"{http_server.url}/{prefix}"
    summary = await copy_tree_async(url, tmp_path / "dst", keys=sorted(files))
    assert summary.copied == 2
    assert read_tree(tmp_path / "dst") == files
    with pytest.raises(UnsupportedOperationError, match="cannot list"):
        await copy_tree_async(url, tmp_path / "other")


def test_cp_copies_one_object_from_an_http_server(
    http_server: StaticServer, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    write_tree(http_server.root / prefix, {"c/0/0": b"chunk"})
    url = f"{http_server.url}/{prefix}"
    code = CliRunner().invoke(cli, ["cp", f"{url}/c/0/0", str(tmp_path / "one") + "/"])
    assert code.exit_code == 0, code.output
    assert (tmp_path / "one/0").read_bytes() == b"chunk"
