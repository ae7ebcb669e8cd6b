"""Ctrl-C ends a command with one line saying how to finish and status 130 (never
click's bare "Aborted!" with status 1, which ``verify`` means as "damage found")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import asyncshard
import asyncshard.integrity.command as integrity_command
from asyncshard.cli import cli
from asyncshard.interrupts import EXIT_INTERRUPTED
from tests.convert.helpers import make_array

SRC = str(Path(asyncshard.__file__).resolve().parents[1])


def test_ctrl_c_during_shard_says_a_rerun_finishes_and_one_does(tmp_path: Path) -> None:
    make_array(tmp_path / "d" / "arr", (64, 64, 64), (4, 4, 4), compressors=None, sparse=False)
    command = [sys.executable, "-m", "asyncshard", "shard", str(tmp_path / "d"), "4"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while b"pass 1/2" not in proc.stderr.read1(4096):  # the pass line: under way
        assert proc.poll() is None and time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err.decode()
    assert b"Traceback" not in err and b"Aborted" not in err
    assert b"Error: interrupted: arrays stay readable; run the same command again" in err
    rerun = subprocess.run(command, env=env, capture_output=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert b"1 array converted in place" in rerun.stdout


@pytest.mark.parametrize("name", ["verify", "repair"])
def test_ctrl_c_during_verify_or_repair_is_not_damage(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(coro: Any) -> Any:
        coro.close()  # as Ctrl-C before the scan's first await
        raise KeyboardInterrupt

    monkeypatch.setattr(integrity_command, "run_sync", interrupted)
    result = CliRunner().invoke(cli, [name, str(tmp_path)])
    assert result.exit_code == EXIT_INTERRUPTED  # not 1, "damage remains"
    assert result.stderr.startswith("Error: interrupted: shards not yet read are unchecked")


@pytest.mark.parametrize("how", ["module", "script"])
def test_ctrl_c_while_the_command_starts_is_one_line_and_130(how: str, tmp_path: Path) -> None:
    """SIGINT right after start, while the command still imports its modules: one line and
    status 130, never a traceback (``python -m asyncshard`` and the console script)."""
    script = Path(sys.executable).with_name("asyncshard")
    assert how == "module" or script.exists(), "the test command installs the console script"
    command = [sys.executable, "-m", "asyncshard"] if how == "module" else [str(script)]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": "/nonexistent"}
    seen: list[tuple[int, bytes]] = []
    for attempt in range(40):  # later and later, until one lands while it imports
        proc = subprocess.Popen(
            [*command, "ls", str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        time.sleep(0.01 * attempt)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if err.startswith(b"Fatal Python error: init_import_site") or (
            b"Traceback" in err and f"{SRC}/asyncshard/".encode() not in err
        ):
            continue  # in Python's own start (site, runpy, the script's imports): not ours
        assert b"Traceback" not in err, err.decode()
        seen.append((proc.returncode, err))
        if proc.returncode == EXIT_INTERRUPTED:
            break
    # before Python handles SIGINT at all, the signal ends it silently (as a shell sees: 130)
    assert all(code in (EXIT_INTERRUPTED, -signal.SIGINT) for code, _ in seen), seen
    code, err = seen[-1]
    assert code == EXIT_INTERRUPTED, seen
    assert err.decode().startswith("Error: interrupted") and len(err.splitlines()) == 1


def test_ctrl_c_in_any_command_is_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A command with no message of its own (``ls``) ends with ``Error: interrupted`` and
    130 on Ctrl-C, not click's "Aborted!" and 1."""
    import asyncshard.cli as cli_module

    def interrupted(coro: Any) -> Any:
        coro.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module.loops, "run", interrupted)
    result = CliRunner().invoke(cli, ["ls", str(tmp_path)])
    assert result.exit_code == EXIT_INTERRUPTED
    assert result.stderr == "Error: interrupted\n"
