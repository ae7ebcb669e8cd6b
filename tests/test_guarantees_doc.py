"""docs/guide/guarantees.md names, for every promise, the tests that hold it: each named
test exists, so the page cannot point at a test that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guide" / "guarantees.md"
REFERENCE = re.compile(r"`((?:tests|src)/[\w/]+\.py)(?:::(\w+))?`")


def test_every_promise_names_tests_that_exist() -> None:
    text = PAGE.read_text()
    references = REFERENCE.findall(text)
    assert len(references) >= 30, references
    missing = []
    for path, name in references:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^\s*(?:async )?def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, missing


def test_every_row_names_a_test() -> None:
    rows = [
        line
        for line in PAGE.read_text().splitlines()
        if line.startswith("| ") and not line.startswith(("| promise", "|---"))
    ]
    assert rows and all(REFERENCE.search(row.rsplit("|", 2)[1]) for row in rows), rows
