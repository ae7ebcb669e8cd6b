"""Fixtures for the whole-tree copy tests: the real test servers, and a source tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.servers.fixtures import (  # noqa: F401 - shared session servers
    gcs_fake,
    http_server,
    s3_server,
)


def write_tree(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """Write ``files`` (key -> bytes) below ``root``; return them."""
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (hidden temp files included: none may be left)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, bytes]:
    """A source folder ``tmp_path/src``: small objects in nested folders, one empty
    object and one of 3 MiB (several parts at the tests' part size)."""
    files = {f"a/b/{i}.bin": os.urandom(100 + i) for i in range(40)}
    files |= {f"c/{i}": os.urandom(4096) for i in range(20)}
    files["empty"] = b""
    files["big/blob"] = os.urandom(3 * 1024 * 1024 + 17)
    return write_tree(tmp_path / "src", files)
