"""zarr-python's synchronous API on uvloop, as the README says: its own loop follows the
event loop policy set before the first zarr call (a fresh process: the test process's
zarr loop exists already)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncshard

SRC = str(Path(asyncshard.__file__).resolve().parents[1])

SCRIPT = """
import asyncio, sys
import numpy as np
import uvloop
import zarr
from asyncshard.zarr_python import ZarrStore

seen = set()
original = ZarrStore.get

async def get(self, *args, **kwargs):
    seen.add(type(asyncio.get_running_loop()).__name__)
    return await original(self, *args, **kwargs)

ZarrStore.get = get
if sys.argv[2] == "uvloop":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
store = ZarrStore(sys.argv[1])
array = zarr.create_array(store, shape=(8, 8), chunks=(4, 4), dtype="u1")
array[...] = np.arange(64, dtype="u1").reshape(8, 8)
again = zarr.open_array(store, mode="r")
assert (again[...] == np.arange(64).reshape(8, 8)).all()
print(sorted(seen))
"""


def loops_seen(folder: Path, policy: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", SCRIPT, str(folder), policy],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_sync_api_runs_on_uvloop_under_its_policy(tmp_path: Path) -> None:
    assert loops_seen(tmp_path / "a", "uvloop") == "['Loop']"  # uvloop.Loop
    assert loops_seen(tmp_path / "b", "default") == "['_UnixSelectorEventLoop']"
