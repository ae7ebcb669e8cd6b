"""The cp, rm -r and put-a-folder commands on local folders, through click's CliRunner."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import asyncshard
from asyncshard.cli import cli
from tests.transfer.conftest import read_tree, write_tree

SRC = str(Path(asyncshard.__file__).resolve().parents[1])


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_cp_one_object_into_a_folder_or_to_a_name(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"f.bin": b"123"})
    code, out = run("cp", str(tmp_path / "src/f.bin"), str(tmp_path / "dst") + "/")
    assert code == 0, out
    assert "1 object copied" in out
    code, out = run("cp", str(tmp_path / "src/f.bin"), f"file://{tmp_path}/dst/sub/g.bin")
    assert code == 0, out
    assert read_tree(tmp_path / "dst") == {"f.bin": b"123", "sub/g.bin": b"123"}
    code, out = run("cp", str(tmp_path / "src/f.bin"), str(tmp_path / "dst/f.bin"))
    assert code == 0 and "0 objects copied (0 B), 1 already equal" in out


def test_cp_usage_errors_exit_2(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"a/f": b"1"})
    code, out = run("cp", str(tmp_path / "src"), str(tmp_path / "dst"))
    assert code == 2 and "cp -r" in out
    code, out = run("cp", "-r", str(tmp_path / "src"), str(tmp_path / "src/a/inside"))
    assert code == 2 and "overlap" in out
    code, out = run("cp", "-r", str(tmp_path / "src"), str(tmp_path / "d"), "--endpoint", "x")
    assert code == 2 and "--endpoint applies" in out
    assert not (tmp_path / "d").exists()


def test_cp_progress_and_json(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {f"k{i}": b"x" * i for i in range(5)})
    result = CliRunner().invoke(
        cli, ["cp", "-r", "--progress", "--json", str(tmp_path / "src"), str(tmp_path / "d")]
    )
    assert result.exit_code == 0, result.output
    assert '"copied": 5' in result.stdout
    assert "objects" in result.stderr  # the bar, asked for off a terminal
    result = CliRunner().invoke(cli, ["cp", "-r", str(tmp_path / "src"), str(tmp_path / "e")])
    assert result.stderr == ""  # no bar off a terminal by default


def test_put_of_a_folder_copies_it_below_the_key(tmp_path: Path) -> None:
    files = write_tree(tmp_path / "flat.zarr/raw", {"zarr.json": b"{}", "c/0/0": b"\0" * 9})
    code, out = run("put", str(tmp_path / "store"), "raw", str(tmp_path / "flat.zarr/raw"))
    assert code == 0, out
    assert read_tree(tmp_path / "store/raw") == files


def test_rm_keys_still_works_and_rm_needs_keys_or_r(tmp_path: Path) -> None:
    write_tree(tmp_path, {"a": b"1", "b": b"2", "dir/c": b"3"})
    code, _ = run("rm", str(tmp_path), "a", "missing")
    assert code == 0 and not (tmp_path / "a").exists()
    code, out = run("rm", str(tmp_path))
    assert code == 2 and "-r" in out
    code, out = run("rm", "-r", str(tmp_path), "dir")
    assert code == 2 and (tmp_path / "dir/c").exists()  # no -y off a terminal
    result = CliRunner().invoke(cli, ["rm", "-r", "-y", str(tmp_path), "dir"])
    assert result.exit_code == 0 and "removed 1 object below" in result.output
    assert read_tree(tmp_path) == {"b": b"2"}


def _rm_on_a_terminal(folder: Path, answer: bytes) -> tuple[int, bytes]:
    """``rm -r folder`` with a terminal as standard input, answering ``answer``."""
    main, terminal = pty.openpty()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncshard", "rm", "-r", str(folder)],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    output = b""
    try:
        while b"[y/N]" not in output:
            output += os.read(main, 1024)
        os.write(main, answer + b"\n")
        proc.wait(timeout=60)
        with contextlib.suppress(OSError):  # the terminal closes with the process
            while chunk := os.read(main, 1024):
                output += chunk
    finally:
        os.close(main)
    return proc.returncode, output


def test_rm_r_asks_on_a_terminal(tmp_path: Path) -> None:
    write_tree(tmp_path / "d", {"a": b"1", "b/c": b"2"})
    code, output = _rm_on_a_terminal(tmp_path / "d", b"n")
    assert code == 1 and b"Delete every object below" in output
    assert read_tree(tmp_path / "d") == {"a": b"1", "b/c": b"2"}
    code, output = _rm_on_a_terminal(tmp_path / "d", b"y")
    assert code == 0 and b"removed 2 objects" in output
    assert read_tree(tmp_path / "d") == {}
