"""The release artefacts: the sdist carries the whole suite and runs it, the wheel holds
the package and its licence only, and the metadata says what a packager looks for."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What is not source: environments, caches and build output of a working checkout.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".matrix",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "asyncshard-demo",
)
#: A part of the suite that needs no server: run from the unpacked sdist.
FROM_SDIST = ["tests/test_ranges.py", "tests/test_keys.py", "tests/test_store_base.py"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of the checkout (nothing written into it)."""
    base = tmp_path_factory.mktemp("release")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    out = base / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "-o", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "deprecated" not in result.stderr.lower(), result.stderr
    return out


def sdist_names(dist: Path) -> set[str]:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name}


def tracked_files() -> set[str]:
    """The files git tracks (or, outside a git checkout, the source files there are)."""
    git = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if git.returncode == 0 and git.stdout.strip():
        return {n for n in git.stdout.splitlines() if (ROOT / n).is_file()} - {".gitignore"}
    return {
        str(p.relative_to(ROOT))
        for top in ("src", "tests", "docs", "benchmarks", "scripts")
        for p in (ROOT / top).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    }


def test_sdist_holds_every_source_file(dist: Path) -> None:
    names = sdist_names(dist)
    missing = tracked_files() - names
    assert not missing, sorted(missing)
    for needed in ("LICENSE", "CHANGELOG.md", "tests/__init__.py", "tests/servers/seaweedfs.py"):
        assert needed in names


def test_wheel_holds_the_package_and_its_licence_only(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"asyncshard", info.split("/", 1)[0]}, tops
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "asyncshard/py.typed" in names
    assert "License-Expression: BSD-3-Clause" in metadata
    for classifier in ("Typing :: Typed", "Operating System :: POSIX :: Linux"):
        assert f"Classifier: {classifier}" in metadata
    assert "Keywords:" in metadata


def test_the_suite_runs_from_the_unpacked_sdist(dist: Path, tmp_path: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()
    env = {**__import__("os").environ, "PYTHONPATH": str(unpacked / "src")}
    where = subprocess.run(
        [sys.executable, "-c", "import asyncshard; print(asyncshard.__file__)"],
        cwd=unpacked,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(unpacked)), where
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *FROM_SDIST],
        cwd=unpacked,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_python_dash_m_runs_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asyncshard", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("asyncshard, version "), result.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "asyncshard", "no-such-command"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert usage.returncode == 2 and "Usage: asyncshard " in usage.stderr, usage.stderr
