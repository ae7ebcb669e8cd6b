"""The README's self-contained Python examples run and print what their comments say.

A block runs here when it reaches no network (no cloud URL, no ``open_sharded`` of a bucket;
the zarr-python examples run against the S3 test server in tests/cloud/test_readme_s3.py);
its local paths are redirected into a temporary folder. Every ``print(...)  # X`` line
must print exactly ``X``.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
NETWORK = re.compile(r"s3://|gs://|https?://|open_sharded\(|ZarrStore\(")
SELF_CONTAINED = [b for b in BLOCKS if not NETWORK.search(b)]


def expected_prints(block: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\s*print\(.*\)  # (.+)$", block, flags=re.M)]


def test_the_readme_has_runnable_examples() -> None:
    assert len(SELF_CONTAINED) >= 2 and all(expected_prints(b) for b in SELF_CONTAINED)


@pytest.mark.parametrize("block", SELF_CONTAINED, ids=lambda b: b.splitlines()[1][:40])
def test_a_readme_example_prints_what_it_says(block: str, tmp_path: Path) -> None:
    code = block.replace("file:///tmp/data", f"file://{tmp_path}/data")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    printed = out.getvalue().splitlines()
    assert printed == expected_prints(block)
