"""Hostile metadata at the served root does not take the unsharded view down."""

from __future__ import annotations

import shutil
from pathlib import Path

import aiohttp
import pytest

from asyncshard.backends import LocalStore
from asyncshard.server.demo import ZARR_PATH
from tests.http_app.conftest import ServeFactory

HOSTILE = {
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "huge-int": b'{"node_type": "array", "shape": [' + b"9" * 5000 + b"]}",
    "list-names": b'{"scales": [{"key": ["a"], "sharding": {"@type": []}}]}',
    "not-utf8": b"\xff\xfe{",
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_the_server_keeps_serving_everything_else(
    name: str,
    serve: ServeFactory,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    demo_folder: Path,
) -> None:
    folder = tmp_path / "data"
    shutil.copytree(demo_folder / ZARR_PATH, folder / ZARR_PATH)
    (folder / "zarr.json").write_bytes(HOSTILE[name])
    (folder / "info").write_bytes(HOSTILE[name])
    (folder / "plain").write_bytes(b"p")
    async with serve(store=LocalStore(folder), unshard=True) as s:
        async with http.get(f"{s.url}/plain") as r:
            assert (r.status, await r.read()) == (200, b"p")
        async with http.get(f"{s.url}/zarr.json") as r:
            assert (r.status, await r.read()) == (200, HOSTILE[name]), "served as it is"
        async with http.get(f"{s.url}/?list=json") as r:
            assert r.status == 200
            assert "plain" in (await r.json())["keys"]
        async with http.get(f"{s.url}/{ZARR_PATH}/c/0/0/0") as r:
            assert r.status == 200, "the sharded array below is still unsharded"
