"""The docs site builds in strict mode (a broken reference or link fails), and its
generated references cover what the code has: every public name, every command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncshard.cli import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out


def test_the_api_reference_has_every_public_name(site: Path) -> None:
    import asyncshard

    page = (site / "reference" / "api" / "index.html").read_text()
    missing = [
        n
        for n in asyncshard.__all__
        if not n.startswith("_") and f'id="asyncshard.{n}"' not in page
    ]
    assert not missing, missing


def test_the_cli_reference_has_every_command(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text()
    assert cli.commands, "no commands"
    missing = [name for name in cli.commands if f"asyncshard {name}" not in page]
    assert not missing, missing
