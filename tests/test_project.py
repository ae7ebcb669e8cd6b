"""Project hygiene the suite enforces: static checks, and CI running the README's command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_on_src() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src/asyncshard"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:sh|bash)\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_commands_and_ci_runs_the_second() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    ci_lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci_lines[-1] == commands[1]


def test_the_package_imports_no_test_tools() -> None:
    """``asyncshard.testing`` (the conformance suite) needs pytest; the package does not."""
    probe = (
        "import sys, asyncshard, asyncshard.sharding, asyncshard.views, asyncshard.cli\n"
        "loaded = {'pytest', 'asyncshard.testing'} & set(sys.modules)\n"
        "assert not loaded, loaded"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
