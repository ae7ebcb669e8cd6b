"""The docs name every command where they list them all."""

from __future__ import annotations

import re
from pathlib import Path

from asyncshard.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def test_cloud_doc_lists_every_command_taking_the_storage_flags() -> None:
    text = (ROOT / "docs" / "cloud.md").read_text()
    found = re.search(r"Every command \(([^)]*)\) takes", text)
    assert found is not None
    listed = set(re.findall(r"`([a-z]+)`", found.group(1)))
    with_flags = {
        name
        for name, command in cli.commands.items()
        if any(param.name == "endpoint" for param in command.params)
    }
    assert listed == with_flags
