"""The asyncshard command line, run in-process through click's runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncshard import __version__
from asyncshard.cli import cli


def run(*args: str, data: bytes | None = None) -> tuple[int, bytes, str]:
    result = CliRunner().invoke(cli, list(args), input=data)
    return result.exit_code, result.stdout_bytes, result.stderr


def test_put_cat_ls_rm(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    assert run("put", url, "a/b/obj", "-", data=b"0123456789")[0] == 0
    src = tmp_path / "src.bin"
    src.write_bytes(b"from a file")
    assert run("put", str(tmp_path), "a/c", str(src))[0] == 0
    assert run("cat", url, "a/b/obj") == (0, b"0123456789", "")
    assert run("cat", url, "a/b/obj", "--range", "2-5")[1] == b"234"
    assert run("cat", url, "a/b/obj", "--range", "7-")[1] == b"789"
    assert run("cat", url, "a/b/obj", "--range", "-2")[1] == b"89"
    assert run("ls", url, "a")[1].decode().split() == ["a/b/", "a/c"]
    # in the store's order: local files stream folder by folder, unsorted
    assert sorted(run("ls", url, "-r")[1].decode().split()) == ["a/b/obj", "a/c", "src.bin"]
    assert run("rm", url, "a/b/obj", "a/c", "missing")[0] == 0
    assert run("ls", url, "-r")[1].decode().split() == ["src.bin"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    for args in [
        ("cat", str(tmp_path), "../etc/passwd"),
        ("cat", str(tmp_path), "missing"),
        ("ls", "nope://bucket"),
        ("cat", str(tmp_path), "k", "--range", "9-1"),
    ]:
        code, _, err = run(*args)
        assert code != 0, args
        assert ("Traceback" not in err and len(err.strip().splitlines()) == 1) or "Usage" in err
        assert err.strip(), args


@pytest.mark.parametrize("recursive", [[], ["-r"]])
def test_ls_of_nothing_fails(tmp_path: Path, recursive: list[str]) -> None:
    """Like ``aws s3 ls``: nothing listed exits 1 and says so, whether the folder is
    missing or empty (one and the same through the Store contract)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "k").write_bytes(b"")
    for args in [(str(tmp_path / "missing"),), (str(tmp_path / "empty"),), (str(tmp_path), "x")]:
        code, out, err = run("ls", *recursive, *args)
        assert (code, out) == (1, b""), args
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "no such folder, or an empty one" in lines[0], err
    assert run("ls", *recursive, str(tmp_path), "d") == (0, b"d/k\n", "")


def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0 and __version__ in out.decode()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://", "no host"),
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("gs://", "no bucket"),
        ("az://", "no container"),
        ("s3://bad bucket", "not a valid bucket name"),
    ],
)
def test_cloud_configuration_errors_are_one_line(url: str, message: str) -> None:
    result = CliRunner().invoke(cli, ["ls", url])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2  # a usage error
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "StoreConfigError" in lines[0] and message in lines[0]


@pytest.mark.parametrize("url", ["s3:/bucket/x", "s3:bucket", "gs:/bucket", "https:/host/x"])
def test_a_url_with_a_missing_slash_fails_and_shows_the_fix(url: str) -> None:
    scheme, _, rest = url.partition(":")
    code, out, err = run("ls", url)
    assert code == 2 and out == b""  # a usage error
    assert f"write {scheme}://{rest.lstrip('/')}" in err and len(err.splitlines()) == 1


def test_a_reader_closing_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``asyncshard ls -r URL | head -1``: no traceback, no error line."""
    import subprocess
    import sys

    for i in range(5000):  # 300 KB of names: more than a pipe holds, so writes block
        (tmp_path / f"key-{i:05d}-{'x' * 50}").write_bytes(b"")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from asyncshard.cli import main; main()",
            "ls",
            "-r",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"key-")  # the store's order
    proc.stdout.close()  # what head does after its line
    err = proc.stderr.read()
    assert proc.wait(60) == 1
    assert err == b""


@pytest.mark.parametrize("flag", ["-j", "--max-in-flight", "--in-flight"])
def test_the_in_flight_flag_is_spelt_alike_in_every_command(tmp_path: Path, flag: str) -> None:
    """``shard`` and ``verify`` both take ``-j``, ``--max-in-flight`` (shown in the help)
    and ``--in-flight`` (a hidden alias)."""
    from tests.convert.helpers import make_array

    make_array(tmp_path / "arr", (16, 16), (4, 4))
    runner = CliRunner()
    for args in (["shard", str(tmp_path), "2"], ["verify", str(tmp_path)]):
        result = runner.invoke(cli, [*args, flag, "2", "-q"])
        assert result.exit_code == 0, result.output
        shown = runner.invoke(cli, [args[0], "--help"]).output
        assert "-j, --max-in-flight" in shown and "--in-flight" not in shown


SIZE_OPTIONS = {
    "cp": ["--part-size", "--max-buffer"],
    "serve": ["--cache-bytes", "--data-cache-bytes", "--buffer-bytes"],
    "shard": ["--shard-bytes"],
    "reshard": ["--shard-bytes"],
}


@pytest.mark.parametrize("command", sorted(SIZE_OPTIONS))
def test_size_options_show_as_size_with_their_forms(command: str) -> None:
    """``--help`` (and the CLI reference, made from it) shows size options as ``SIZE``,
    not ``TEXT``, and says what a size may be."""
    shown = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
    for flag in SIZE_OPTIONS[command]:
        assert f"{flag} SIZE" in shown and f"{flag} TEXT" not in shown
    assert "SIZE: bytes, or a number with k, M, G or T (binary multiples; 256M, 1GiB)" in shown
    args = {"cp": ["a", "b"], "serve": ["x"], "shard": ["x", "2"], "reshard": ["x", "2"]}
    wrong = CliRunner().invoke(cli, [command, *args[command], SIZE_OPTIONS[command][0], "3x"])
    assert wrong.exit_code == 2 and "not a size: '3x'" in wrong.output
