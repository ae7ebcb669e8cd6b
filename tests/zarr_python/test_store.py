"""ZarrStore beyond zarr's conformance suite: zero copies, request costs of the batch and
conditional verbs, construction, listing semantics and the optional import."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype

from asyncshard.backends import MemoryStore
from asyncshard.errors import InvalidRangeError, StoreConfigError
from asyncshard.zarr_python import ZarrStore

PROTO = default_buffer_prototype()
DATA = bytes(range(256)) * 16


def _buf(data: bytes) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(data)


def _shares(buffer: Any, data: Any) -> bool:
    return bool(np.shares_memory(buffer.as_numpy_array(), np.frombuffer(data, dtype="B")))


async def test_reads_share_the_memory_asyncshard_read_into() -> None:
    inner = MemoryStore()
    await inner.set("k", DATA)
    stored = await inner.get("k")  # a view of the stored object
    store = ZarrStore(inner)
    whole = await store.get("k", PROTO)
    part = await store.get("k", PROTO, RangeByteRequest(10, 20))
    batch = await store.get_partial_values(PROTO, [("k", RangeByteRequest(0, 4))])
    assert whole is not None and part is not None and batch[0] is not None
    assert whole.to_bytes() == DATA and part.to_bytes() == DATA[10:20]
    assert _shares(whole, stored) and _shares(part, stored) and _shares(batch[0], stored)


async def test_get_partial_values_is_one_coalesced_batch(
    s3_place: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_place
    store = ZarrStore(url, **options)
    await store.set("a", _buf(DATA))
    await store.set("b", _buf(DATA))
    store.stats.reset()
    requests = [("a", RangeByteRequest(i * 100, i * 100 + 10)) for i in range(8)]
    requests += [("b", SuffixByteRequest(5)), ("b", OffsetByteRequest(4090)), ("c", None)]
    got = await store.get_partial_values(PROTO, requests)
    assert [None if g is None else g.to_bytes() for g in got] == [
        DATA[i * 100 : i * 100 + 10] for i in range(8)
    ] + [DATA[-5:], DATA[4090:], None]
    # 8 ranges of "a" within the gap cap: 1 request; suffix and offset of "b" go alone
    # (they cannot merge without the size); the missing "c": 1
    assert store.stats.requests == {"get": 4}


async def test_set_if_not_exists_is_one_conditional_write() -> None:
    store = ZarrStore(MemoryStore())
    await store.set("k", _buf(b"old"))
    store.stats.reset()
    await store.set_if_not_exists("k", _buf(b"new"))
    await store.set_if_not_exists("n", _buf(b"new"))
    assert store.stats.requests == {"put": 2}  # no HEAD: the write itself is the check
    assert await store.inner.get("k") == b"old" and await store.inner.get("n") == b"new"


async def test_set_if_not_exists_without_conditional_writes_checks_first(
    s3_place: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_place
    store = ZarrStore(url, conditional_writes=False, **options)
    await store.set("k", _buf(b"old"))
    store.stats.reset()
    await store.set_if_not_exists("k", _buf(b"new"))
    await store.set_if_not_exists("n", _buf(b"new"))
    assert store.stats.requests == {"head": 2, "put": 1}
    assert await store.inner.get("k") == b"old" and await store.inner.get("n") == b"new"


async def test_listing_is_by_folder_and_names() -> None:
    store = ZarrStore(MemoryStore())
    for key in ("c/0", "c/1/x", "cx/0", "zarr.json"):
        await store.set(key, _buf(b"1234"))
    assert sorted([k async for k in store.list_dir("c")]) == ["0", "1"]
    assert sorted([k async for k in store.list_dir("")]) == ["c", "cx", "zarr.json"]
    assert await store.getsize_prefix("c") == 8  # "cx/0" is not in the folder "c"
    assert await store.getsize("zarr.json") == 4
    with pytest.raises(FileNotFoundError):
        await store.getsize("nope")
    await store.delete_dir("c")
    assert sorted([k async for k in store.list()]) == ["cx/0", "zarr.json"]


async def test_bad_input_gets_typed_errors() -> None:
    inner = MemoryStore()
    with pytest.raises(StoreConfigError, match="unknown mode"):
        ZarrStore(inner, mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options apply to a URL"):
        ZarrStore(inner, endpoint="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="a URL, a path, an asyncshard Store"):
        ZarrStore(42)  # type: ignore[arg-type]
    store = ZarrStore(inner)
    with pytest.raises(InvalidRangeError):
        await store.get("k", PROTO, RangeByteRequest(5, 2))
    with pytest.raises(TypeError, match="must be a zarr Buffer"):
        await store.set("k", b"raw")  # type: ignore[arg-type]


async def test_url_stores_pickle_equal_and_share_data(tmp_path: Path) -> None:
    store = ZarrStore(f"file://{tmp_path}")
    await store.set("k", _buf(b"v"))
    copy = pickle.loads(pickle.dumps(store))
    assert copy == store and copy is not store
    got = await copy.get("k", PROTO)
    assert got is not None and got.to_bytes() == b"v"
    assert ZarrStore("memory://") != ZarrStore("memory://")  # two separate memory stores
    reader = store.with_read_only(True)
    assert reader.inner is store.inner and reader != store and reader.read_only
    view = store.with_mode("inner-chunks")
    assert view.inner is store.inner and view.mode == "inner-chunks" and view != store
    assert pickle.loads(pickle.dumps(view)) == view


def test_importing_asyncshard_does_not_import_zarr() -> None:
    code = "import sys, asyncshard; sys.exit('zarr' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
