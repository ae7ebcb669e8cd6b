"""A static type checker accepts the obspec adapters where obspec's protocols are typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_mypy_accepts_to_obspec_as_every_obspec_protocol() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(HERE / "typing_check.py")],
        cwd=HERE.parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_rejects_a_store_where_an_obspec_protocol_is_typed(tmp_path: Path) -> None:
    """The check above can fail: a plain Store is not an obspec client."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import obspec\nfrom asyncshard.backends import MemoryStore\n"
        "get: obspec.GetAsync = MemoryStore()\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(bad)],
        cwd=HERE.parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "GetAsync" in result.stdout
