"""Group documents through the unsharded view: consolidated metadata naming sharded
arrays is presented unsharded and mapped back when written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.errors import ConflictError, InvalidMetadataError
from asyncshard.formats.zarr3.documents import unsharded_metadata
from asyncshard.views import UnshardedView
from asyncshard.views import unsharded as unsharded_module
from tests.zarr_python.helpers import sharded_doc

ARRAY: dict[str, Any] = sharded_doc()
PLAIN: dict[str, Any] = {**unsharded_metadata(ARRAY), "shape": [4]}


def group(members: dict[str, Any]) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": members},
    }


async def _store() -> MemoryStore:
    inner = MemoryStore()
    await inner.set("g/a/zarr.json", json.dumps(ARRAY).encode())
    await inner.set("g/p/zarr.json", json.dumps(PLAIN).encode())
    await inner.set("g/sub/b/zarr.json", json.dumps(ARRAY).encode())
    doc = group({"a": ARRAY, "p": PLAIN, "sub": group({"b": ARRAY})})
    await inner.set("g/zarr.json", json.dumps(doc).encode())
    return inner


async def test_consolidated_sharded_arrays_are_presented_unsharded() -> None:
    inner = await _store()
    view = UnshardedView(inner)
    got = await view.get_object("g/zarr.json")
    assert got is not None and got.meta.version is not None
    members = json.loads(bytes(got.data))["consolidated_metadata"]["metadata"]
    assert members["a"] == unsharded_metadata(ARRAY) and members["p"] == PLAIN
    assert members["sub"]["consolidated_metadata"]["metadata"]["b"] == unsharded_metadata(ARRAY)
    assert got.meta.version.startswith("unshard:")
    assert (await view.head("g/zarr.json")) == got.meta
    await view.get_object("g/zarr.json", if_match=got.meta.version)
    raw = await inner.head("g/zarr.json")
    assert raw is not None and raw.version is not None
    with pytest.raises(ConflictError):
        await view.get_object("g/zarr.json", if_match=raw.version)


async def test_a_group_without_sharded_members_is_served_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inner = await _store()
    await inner.set("h/zarr.json", json.dumps(group({"p": PLAIN})).encode())
    view = UnshardedView(inner)
    assert await view.get("h/zarr.json") == await inner.get("h/zarr.json")
    monkeypatch.setattr(unsharded_module, "MAX_GROUP_DOCUMENT", 64)  # too large to rewrite
    assert await view.get("g/zarr.json") == await inner.get("g/zarr.json")


async def test_a_group_written_through_the_view_names_its_arrays_sharded() -> None:
    inner = await _store()
    view = UnshardedView(inner, writable=True)
    got = await view.get_object("g/zarr.json")
    assert got is not None
    written = json.loads(bytes(got.data))
    written["consolidated_metadata"]["metadata"]["a"]["attributes"] = {"n": 1}
    await view.set("g/zarr.json", json.dumps(written).encode(), if_match=got.meta.version)
    stored = json.loads(bytes(await inner.get("g/zarr.json") or b""))
    members = stored["consolidated_metadata"]["metadata"]
    assert members["a"] == {**ARRAY, "attributes": {"n": 1}} and members["p"] == PLAIN
    assert members["sub"]["consolidated_metadata"]["metadata"]["b"] == ARRAY
    written["consolidated_metadata"]["metadata"]["a"]["data_type"] = "int64"
    with pytest.raises(InvalidMetadataError, match="consolidated metadata of 'a'"):
        await view.set("g/zarr.json", json.dumps(written).encode())
    assert json.loads(bytes(await inner.get("g/zarr.json") or b"")) == stored
