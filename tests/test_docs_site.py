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


API_PAGES = ["backends", "sharding", "convert", "integrity", "transfer", "server", "obspec"]


@pytest.mark.parametrize("page", [*API_PAGES, "zarr_python", "testing"])
def test_each_api_page_has_every_public_name_of_its_package(site: Path, page: str) -> None:
    """The synchronous twins (``shard_store = blocking(shard_store_async)``) included."""
    import importlib

    module = importlib.import_module(f"asyncshard.{page}")
    html = (site / "reference" / "api" / page / "index.html").read_text()
    missing = [n for n in module.__all__ if f'id="asyncshard.{page}.{n}"' not in html]
    assert not missing, missing


def test_the_cli_reference_has_every_command(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text()
    assert cli.commands, "no commands"
    missing = [name for name in cli.commands if f"asyncshard {name}" not in page]
    assert not missing, missing


def config_rows(site: Path) -> dict[str, str]:
    """Option name -> the text of its row, from the configuration reference page."""
    import html
    import re

    page = (site / "reference" / "configuration" / "index.html").read_text()
    rows: dict[str, str] = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td>(.*?)</td>", row, flags=re.S)
        ]
        if len(cells) == 4:
            rows.setdefault(cells[0], " | ".join(cells))
    return rows


def test_the_configuration_reference_lists_every_option_with_its_meaning(site: Path) -> None:
    import dataclasses
    import inspect

    from asyncshard.backends.cloud.store import CloudStore
    from asyncshard.backends.local.store import LocalStore
    from asyncshard.integrity import repair_async
    from asyncshard.server.config import AppConfig
    from asyncshard.sharding.engine.adapter import ShardedAdapter
    from asyncshard.transfer import copy_tree_async

    rows = config_rows(site)
    own = {
        name
        for cls in (CloudStore, LocalStore, ShardedAdapter, copy_tree_async, repair_async)
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name != "config"
    } | {f.name for f in dataclasses.fields(AppConfig)}
    missing = sorted(own - set(rows))
    assert not missing, missing
    undescribed = sorted(n for n in own if rows[n].endswith("|") or rows[n].split(" | ")[3] == "")
    assert not undescribed, undescribed
    for obstore_key in ("access_key_id", "endpoint", "service_account", "account_name", "timeout"):
        assert obstore_key in rows, obstore_key
