"""--unshard: sharded datasets served as if unsharded, checked against tensorstore."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import tensorstore as ts

from asyncshard.backends import LocalStore
from asyncshard.cache import LoadingCache
from asyncshard.formats.precomputed.volume import unsharded_info_bytes
from asyncshard.ranges import ByteRange, Range
from asyncshard.server.app import make_app
from asyncshard.server.demo import (
    CHUNK,
    PRECOMPUTED_PATH,
    SCALE_KEY,
    ZARR_PATH,
    demo_volume,
)
from asyncshard.sharding.zarr import ZarrFormat
from asyncshard.store import WOULD_WAIT, GetResult, ObjectMeta
from asyncshard.views.unsharded import DEFAULT_MAX_DEPTH, UnshardedView
from tests.http_app.conftest import Served, ServeFactory, running

VOLUME = demo_volume()


@pytest.fixture
async def unsharded(serve: ServeFactory, demo_folder: Path) -> AsyncIterator[Served]:
    async with serve(store=LocalStore(demo_folder), unshard=True, cache_bytes=1 << 20) as s:
        yield s


async def test_zarr_metadata_is_rewritten(
    unsharded: Served, http: aiohttp.ClientSession, demo_folder: Path
) -> None:
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/zarr.json") as r:
        doc = await r.json(content_type=None)
        assert r.headers["Content-Length"] == str(len(await r.read()))
        etag = r.headers["ETag"]
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [CHUNK] * 3
    assert [c["name"] for c in doc["codecs"]] == ["bytes", "gzip"]
    assert doc["shape"] == list(VOLUME.shape)
    raw = json.loads((demo_folder / ZARR_PATH / "zarr.json").read_bytes())
    assert raw["codecs"][0]["name"] == "sharding_indexed"
    async with serve_raw(demo_folder) as raw_url, http.get(f"{raw_url}/{ZARR_PATH}/zarr.json") as r:
        assert r.headers["ETag"] != etag, "a cache must not confuse the two documents"


def serve_raw(folder: Path) -> AbstractAsyncContextManager[str]:
    """The same folder served without --unshard."""
    return running(make_app(LocalStore(folder)))


async def test_inner_chunks_at_their_own_keys(
    unsharded: Served, http: aiohttp.ClientSession
) -> None:
    # chunk (3, 7, 7) lives in shard (1, 1, 1); there is no file at c/3/7/7
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/c/3/7/7") as r:
        assert r.status == 200
        body = await r.read()
        assert r.headers["Content-Length"] == str(len(body))
        assert "Content-Encoding" not in r.headers
    block = np.frombuffer(gzip.decompress(body), np.uint8).reshape((CHUNK,) * 3)
    assert (block == VOLUME[96:128, 224:256, 224:256]).all()
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/c/3/7/7", headers={"Range": "bytes=-4"}) as r:
        assert (r.status, await r.read()) == (206, body[-4:])
        assert r.headers["Content-Range"] == f"bytes {len(body) - 4}-{len(body) - 1}/{len(body)}"
    async with http.head(f"{unsharded.url}/{ZARR_PATH}/c/3/7/7") as r:
        assert r.headers["Content-Length"] == str(len(body))
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/c/4/0/0") as r:
        assert r.status == 404, "outside the array"


async def test_precomputed_scale_by_chunk_name(
    unsharded: Served, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{unsharded.url}/{PRECOMPUTED_PATH}/info") as r:
        info = await r.json(content_type=None)
    assert "sharding" not in info["scales"][0]
    base = f"{unsharded.url}/{PRECOMPUTED_PATH}/{SCALE_KEY}"
    async with http.get(f"{base}/224-256_32-64_96-128") as r:
        assert r.status == 200
        block = np.frombuffer(await r.read(), np.uint8).reshape((CHUNK,) * 3)
    assert (block == VOLUME[96:128, 32:64, 224:256]).all()  # raw chunks are x fastest
    async with http.get(f"{base}/0.shard") as r:
        assert r.status == 404, "shard files are hidden in the unsharded view"
    async with http.get(f"{base}/0-31_0-32_0-32") as r:
        assert r.status == 404


async def test_listings_show_the_unsharded_layout_without_reading_indexes(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path
) -> None:
    """Chunk folders exist but do not enumerate chunks: one backend listing, no index read
    (enumerating would read one index per shard: 1,024 requests for 1,024 shards)."""
    inner = LocalStore(demo_folder)
    async with serve(store=inner, unshard=True) as s:
        async with http.get(f"{s.url}/{ZARR_PATH}/zarr.json") as r:
            assert r.status == 200
        inner.stats.reset()
        for folder in ("c/", "c/3/", "c/3/7/"):
            async with http.get(f"{s.url}/{ZARR_PATH}/{folder}?list=json") as r:
                assert r.status == 200, folder
                assert (await r.json())["keys"] == [], "chunk keys are not enumerated"
        assert inner.stats.requests["get"] == 0, "no index was read"
        assert inner.stats.requests["list"] == 3
        async with http.get(f"{s.url}/{ZARR_PATH}/c/9/?list=json") as r:
            assert r.status == 404, "outside the chunk grid"
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/{SCALE_KEY}/?list=json") as r:
            assert r.status == 200, "the scale folder exists, though it lists no chunk"
            assert (await r.json())["keys"] == [], "shards hidden, chunk names not enumerated"


async def test_sharded_scale_listing_reads_no_index(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path, tmp_path: Path
) -> None:
    """Listing a sharded scale's folder is one backend listing: no shard or minishard
    index is read to enumerate chunk names (which viewers never list)."""
    folder = tmp_path / "data"
    shutil.copytree(demo_folder / PRECOMPUTED_PATH, folder / PRECOMPUTED_PATH)
    scale_dir = folder / PRECOMPUTED_PATH / SCALE_KEY
    (scale_dir / "provenance").write_bytes(b"p")
    (scale_dir / "0-32_0-32_0-32").write_bytes(b"stray")  # shadowed by the virtual chunk
    (scale_dir / "sub").mkdir()
    (scale_dir / "sub" / "x").write_bytes(b"x")
    inner = LocalStore(folder)
    async with serve(store=inner, unshard=True) as s:
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/info") as r:
            assert r.status == 200
        inner.stats.reset()
        base = f"{s.url}/{PRECOMPUTED_PATH}/{SCALE_KEY}"
        async with http.get(f"{base}/?list=json") as r:
            assert r.status == 200
            listed = await r.json()
        assert listed["keys"] == ["provenance"]
        assert listed["prefixes"] == ["sub/"]
        assert inner.stats.requests["get"] == 0, "no index was read"
        assert inner.stats.requests["list"] == 1
        async with http.get(f"{base}/provenance") as r:
            assert await r.read() == b"p"
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/?list=json") as r:
            assert f"{SCALE_KEY}/" in (await r.json())["prefixes"]


LONG = "7" * 5000  # int() refuses strings of more than 4300 digits


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"{ZARR_PATH}/c/{LONG}/0/0", id="zarr-chunk"),
        pytest.param(f"{ZARR_PATH}/c/0/0/{LONG}", id="zarr-chunk-last"),
        pytest.param(f"{ZARR_PATH}/c/{LONG}/", id="zarr-folder"),
        pytest.param(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/{LONG}-32_0-32_0-32", id="precomputed"),
        pytest.param(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0-32_0-32_0-{LONG}", id="precomputed-end"),
        pytest.param(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/{'7' * 20}-32_0-32_0-32", id="20-digits"),
    ],
)
async def test_overlong_numbers_in_keys_are_not_errors(
    unsharded: Served, http: aiohttp.ClientSession, path: str
) -> None:
    """A number too long for ``int()`` is not a chunk key (404, at worst 400), never 500."""
    async with http.get(f"{unsharded.url}/{path}") as r:
        assert r.status in (400, 404), await r.text()


async def test_huge_ranges_of_virtual_chunks(
    unsharded: Served, http: aiohttp.ClientSession
) -> None:
    for path in (f"{ZARR_PATH}/c/0/0/0", f"{PRECOMPUTED_PATH}/{SCALE_KEY}/0-32_0-32_0-32"):
        url = f"{unsharded.url}/{path}"
        async with http.get(url) as r:
            whole = await r.read()
        async with http.get(url, headers={"Range": f"bytes={LONG}-"}) as r:
            assert (r.status, await r.read()) == (200, whole), "unrepresentable: ignored"
        async with http.get(url, headers={"Range": "bytes=9999999999999999999-"}) as r:
            assert r.status == 416
            assert r.headers["Content-Range"] == f"bytes */{len(whole)}"


@pytest.mark.parametrize("error", [ValueError, OverflowError])
async def test_unparsable_keys_are_400_not_500(
    unsharded: Served,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    error: type[Exception],
) -> None:
    """The last line of defence: a format's key parser failing with a bare ValueError or
    OverflowError makes the key the client's error (400), not the server's (500)."""

    def fail(self: object, key: str) -> None:
        raise error("cannot convert")

    monkeypatch.setattr(ZarrFormat, "locate", fail)
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/c/0/0/0") as r:
        assert r.status == 400, await r.text()
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/c/0/0/") as r:  # lists shard files
        assert r.status == 400, await r.text()
    async with http.get(f"{unsharded.url}/{ZARR_PATH}/zarr.json") as r:
        assert r.status == 200, "the metadata is not parsed as a chunk key"


async def test_deep_paths_cost_a_bounded_number_of_probes(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path, tmp_path: Path
) -> None:
    """Only the nearest DEFAULT_MAX_DEPTH folders above a key are searched for a dataset
    (two metadata reads each), however deep the path."""
    folder = tmp_path / "data"
    near = "/".join(f"n{i}" for i in range(40))
    shutil.copytree(demo_folder / ZARR_PATH, folder / near / ZARR_PATH)
    inner = LocalStore(folder)
    deep = "/".join(f"d{i}" for i in range(200))
    async with serve(store=inner, unshard=True) as s:
        inner.stats.reset()
        async with http.get(f"{s.url}/{deep}/k") as r:
            assert r.status == 404
        assert inner.stats.requests["get"] <= 2 * DEFAULT_MAX_DEPTH + 1
        inner.stats.reset()
        async with http.get(f"{s.url}/{deep}/") as r:
            assert r.status == 404
        assert inner.stats.requests["get"] <= 2 * DEFAULT_MAX_DEPTH
        # a dataset below many folders is still found from its own keys
        async with http.get(f"{s.url}/{near}/{ZARR_PATH}/c/3/7/7") as r:
            assert r.status == 200, "an inner chunk, read out of its shard"
            body = await r.read()
    block = np.frombuffer(gzip.decompress(body), np.uint8).reshape((CHUNK,) * 3)
    assert (block == VOLUME[96:128, 224:256, 224:256]).all()


async def test_unsharded_info_is_the_same_through_the_server_and_the_view(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path
) -> None:
    """The server's --unshard and the library's view render the rewritten info the same
    way (one function), so the same document has the same bytes."""
    raw = json.loads((demo_folder / PRECOMPUTED_PATH / "info").read_bytes())
    server = serve(store=LocalStore(demo_folder), unshard=True)
    async with server as s, http.get(f"{s.url}/{PRECOMPUTED_PATH}/info") as r:
        through_server = await r.read()
    async with UnshardedView(LocalStore(demo_folder)) as view:
        through_view = bytes(await view.get(f"{PRECOMPUTED_PATH}/info") or b"")
    assert through_server == through_view == unsharded_info_bytes(raw)
    assert "sharding" not in json.loads(through_view)["scales"][0]


class ClosingLog(LocalStore):
    """A LocalStore that remembers being closed."""

    closed = False

    async def _close(self) -> None:
        self.closed = True
        await super()._close()


async def test_a_served_view_that_lists_chunks(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path
) -> None:
    """An UnshardedView with list_chunks served: the volume's listing is one backend
    listing, a scale's folder enumerates its chunk names (reading its indexes), and
    closing the server closes the store."""
    inner = ClosingLog(demo_folder)
    view = UnshardedView(inner, list_chunks=True)
    async with serve(store=view) as s:
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/info") as r:
            assert r.status == 200
        inner.stats.reset()
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/?list=json") as r:
            listed = await r.json()
        assert listed["keys"] == ["info"] and listed["prefixes"] == [f"{SCALE_KEY}/"]
        assert (inner.stats.requests["get"], inner.stats.requests["list"]) == (0, 1)
        async with http.get(f"{s.url}/{PRECOMPUTED_PATH}/{SCALE_KEY}/?list=json") as r:
            keys = (await r.json())["keys"]
        assert len(keys) == 256 and "0-32_0-32_0-32" in keys, "asked for: enumerated"
        assert not any(".shard" in k for k in keys)
        assert not inner.closed
    assert inner.closed, "closing the view closes the store it wraps"


async def test_index_cache_lives_in_the_server(
    serve: ServeFactory, http: aiohttp.ClientSession, demo_folder: Path
) -> None:
    inner = LocalStore(demo_folder)
    async with serve(store=inner, unshard=True) as s:
        async with http.get(f"{s.url}/{ZARR_PATH}/zarr.json") as r:
            await r.read()
        inner.stats.reset()
        async with http.get(f"{s.url}/{ZARR_PATH}/c/0/0/0") as r:
            await r.read()
        cold = inner.stats.requests["get"]
        inner.stats.reset()
        async with http.get(f"{s.url}/{ZARR_PATH}/c/0/0/1") as r:
            await r.read()
        assert (cold, inner.stats.requests["get"]) == (2, 1), "index + data cold, data warm"


async def test_tensorstore_reads_the_unsharded_view(unsharded: Served) -> None:
    """An unsharded reader (tensorstore over HTTP) sees the whole volume, both formats."""
    zarr = await ts.open({"driver": "zarr3", "kvstore": f"{unsharded.url}/{ZARR_PATH}/"}, read=True)
    assert zarr.chunk_layout.read_chunk.shape == (CHUNK,) * 3, "seen unsharded"
    assert (await zarr.read() == VOLUME).all()
    pre = await ts.open(
        {"driver": "neuroglancer_precomputed", "kvstore": f"{unsharded.url}/{PRECOMPUTED_PATH}/"},
        read=True,
    )
    assert (np.asarray(await pre.read())[..., 0].transpose(2, 1, 0) == VOLUME).all()


async def test_plain_keys_pass_through(serve: ServeFactory, http: aiohttp.ClientSession) -> None:
    async with serve(unshard=True) as s:
        async with http.get(f"{s.url}/obj", headers={"Range": "bytes=0-3"}) as r:
            assert (r.status, await r.read()) == (206, bytes(range(4)))
        async with http.get(f"{s.url}/meta.json") as r:
            assert await r.read() == b'{"zarr_format": 3}'
        async with http.put(f"{s.url}/obj", data=b"x") as r:
            assert r.status == 405


async def test_unsharded_arrays_and_odd_metadata_pass_through(tmp_path: Path) -> None:
    flat = {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }  # fmt: skip
    files = {
        "flat/zarr.json": json.dumps(flat).encode(),
        "flat/c/0": b"\x01\x02",
        "bad/zarr.json": b"{not json",
        "bad/c/0": b"raw",
        "notvol/info": b'{"scales": "nope"}',
        "notvol/s/0-1_0-1_0-1": b"raw",
    }
    for key, value in files.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(value)
    async with UnshardedView(LocalStore(tmp_path)) as view:
        for key, value in files.items():
            assert await view.get(key) == value, key
        meta = await view.head("flat/c/0")
        assert meta is not None and not (meta.version or "").startswith("unshard:")


class KeyLog(LocalStore):
    """A LocalStore that remembers which keys were read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.keys: list[str] = []

    async def get_object(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> GetResult | None:
        self.keys.append(key)
        return await super().get_object(key, byte_range, if_match=if_match)


async def test_metadata_lookups_stop_at_a_dataset(tmp_path: Path, demo_folder: Path) -> None:
    flat = {"zarr_format": 3, "node_type": "array", "shape": [4, 4]}
    (tmp_path / "g" / "flat" / "c" / "0").mkdir(parents=True)
    (tmp_path / "g" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (tmp_path / "g" / "flat" / "zarr.json").write_text(json.dumps(flat))
    (tmp_path / "g" / "flat" / "c" / "0" / "1").write_bytes(b"x")
    store = KeyLog(tmp_path)
    async with UnshardedView(store) as view:
        assert await view.get("g/flat/c/0/1") == b"x"
        assert await view.get("g/flat/c/0/1") == b"x"
    looked_up = {k.rsplit("/", 1)[0] if "/" in k else "" for k in store.keys if k != "g/flat/c/0/1"}
    assert looked_up == {"", "g", "g/flat"}, "cached, and nothing below the array"
    assert store.keys.count("g/flat/zarr.json") == 1

    sharded = KeyLog(demo_folder)
    async with UnshardedView(sharded) as view:
        for i in range(4):
            assert await view.get(f"{ZARR_PATH}/c/0/0/{i}") is not None
    assert not any(
        k.startswith(f"{ZARR_PATH}/c/") and k.endswith(("zarr.json", "info")) for k in sharded.keys
    )


@pytest.fixture
def demo_copy(demo_folder: Path, tmp_path: Path) -> Path:
    """A copy of the demo volume this test may change."""
    shutil.copytree(demo_folder, tmp_path / "demo")
    return tmp_path / "demo"


async def test_warm_chunks_are_answered_without_waiting(demo_copy: Path) -> None:
    """``get_now`` (the server's first read) answers a chunk whose folder and shard index
    are cached with one range read and no await (none with the chunk in the data cache),
    exactly as ``get``; anything not at hand is ``WOULD_WAIT``."""
    inner = LocalStore(demo_copy)
    view = UnshardedView(inner)
    key, neighbour = f"{ZARR_PATH}/c/0/0/0", f"{ZARR_PATH}/c/0/0/1"
    assert view.get_now(key) is WOULD_WAIT, "nothing cached yet"
    first = await view.get(key)
    inner.stats.reset()
    now = view.get_now(neighbour)
    assert isinstance(now, GetResult) and inner.stats.requests["get"] == 1
    assert bytes(now.data) == bytes(await view.get(neighbour) or b"")
    assert now.meta.key == neighbour and now.meta.version == (await view.head(neighbour)).version  # type: ignore[union-attr]
    assert view.get_now(f"{ZARR_PATH}/c/0/0/9") is None, "outside the array"
    assert view.get_now(f"{ZARR_PATH}/zarr.json") not in (None, WOULD_WAIT)
    view.folders.invalidate(f"{ZARR_PATH}/")  # metadata written: routes are not trusted
    assert view.get_now(key) is WOULD_WAIT
    assert await view.get(key) == first
    assert isinstance(view.get_now(key), GetResult)
    generation = view.folders.generation
    await view.folders.node(f"{ZARR_PATH}/", fresh=True)  # reloaded (another process?)
    assert view.folders.generation > generation, "remembered routes are recomputed"
    assert isinstance(view.get_now(key), GetResult)

    cached = UnshardedView(inner, data_cache=LoadingCache(1 << 20))
    await cached.get(key)
    inner.stats.reset()
    assert bytes(cached.get_now(key).data) == first  # type: ignore[union-attr]
    assert inner.stats.requests["get"] == 0, "from the data cache"


async def test_rewritten_shard_is_never_served_stale(demo_copy: Path) -> None:
    """A shard replaced behind the view (another writer): the next ``get_now`` of a
    cached route either declines or reads the new shard, never the old bytes."""
    view = UnshardedView(LocalStore(demo_copy))
    key, moved = f"{ZARR_PATH}/c/0/0/0", f"{ZARR_PATH}/c/0/0/4"
    old, new = await view.get(key), await view.get(moved)
    assert old != new
    shards = demo_copy / ZARR_PATH / "c" / "0" / "0"
    shutil.copy(shards / "1", shards / "replacement")
    (shards / "replacement").rename(shards / "0")  # the chunk at x=4 now sits at x=0
    now = view.get_now(key)
    assert now is WOULD_WAIT or bytes(now.data) == new  # type: ignore[union-attr]
    assert await view.get(key) == new
    assert bytes(view.get_now(key).data) == new  # type: ignore[union-attr]


async def test_an_old_index_is_confirmed_by_the_read(demo_copy: Path) -> None:
    """Past ``recheck_after`` a cached chunk is read again, conditioned on the index's
    version (one request, no ``head``); that read makes the index recent again."""
    inner = LocalStore(demo_copy)
    view = UnshardedView(inner, data_cache=LoadingCache(1 << 20), recheck_after=0.05)
    key = f"{ZARR_PATH}/c/0/0/0"
    expected = await view.get(key)
    await asyncio.sleep(0.1)
    inner.stats.reset()
    assert bytes(view.get_now(key).data) == expected  # type: ignore[union-attr]
    assert inner.stats.requests["get"] == 1 and inner.stats.requests["head"] == 0
    assert bytes(view.get_now(key).data) == expected  # type: ignore[union-attr]
    assert inner.stats.requests["get"] == 1, "the index is recent again: the data cache"


@pytest.mark.parametrize(
    ("folder", "chunk"),
    [(ZARR_PATH, "c/0/0/0"), (f"{PRECOMPUTED_PATH}/{SCALE_KEY}", "224-256_32-64_96-128")],
)
async def test_repeated_chunk_reads_are_remembered(
    demo_copy: Path, folder: str, chunk: str
) -> None:
    """With a data cache, a chunk answered from the caches is remembered (Zarr and
    precomputed alike): asked again, the same answer comes back (no cache lookups), for
    the same range only, and not once the folder's metadata is invalidated."""
    inner = LocalStore(demo_copy)
    view = UnshardedView(inner, data_cache=LoadingCache(1 << 20))
    key = f"{folder}/{chunk}"
    expected = await view.get(key)
    first = view.get_now(key)
    assert isinstance(first, GetResult) and bytes(first.data) == expected
    inner.stats.reset()
    assert view.get_now(key) is first
    part = view.get_now(key, Range(0, 10))
    assert isinstance(part, GetResult) and part is not first and bytes(part.data) == expected[:10]
    assert view.get_now(key, Range(0, 10)) is part
    assert inner.stats.requests["get"] == 0
    assert view.stats.requests["get"] >= 4, "each answer is counted like a read"
    view.folders.invalidate(f"{folder.split('/')[0]}/")
    assert view.get_now(key) is WOULD_WAIT


async def test_remembered_answers_leave_with_their_bytes(demo_copy: Path) -> None:
    """A data cache that evicts a chunk forgets its remembered answer too: the next read
    is a read again (the remembered answers never hold bytes the cache let go)."""
    inner = LocalStore(demo_copy)
    a, b = f"{ZARR_PATH}/c/0/0/0", f"{ZARR_PATH}/c/0/0/1"
    chunk_bytes = len(await UnshardedView(inner).get(a) or b"")
    view = UnshardedView(inner, data_cache=LoadingCache(chunk_bytes + 1000))  # one chunk
    await view.get(a)
    first = view.get_now(a)
    assert view.get_now(a) is first
    await view.get(b)  # evicts a's bytes
    inner.stats.reset()
    again = view.get_now(a)
    assert isinstance(again, GetResult) and again is not first
    assert bytes(again.data) == bytes(first.data)  # type: ignore[union-attr]
    assert inner.stats.requests["get"] == 1, "read again"


async def test_an_aged_answer_holds_again_once_its_index_is_confirmed(demo_copy: Path) -> None:
    """Past ``recheck_after`` a remembered answer is not trusted; once a read of any
    chunk of the shard confirms the index, the shard's other answers hold again without
    a read of their own."""
    inner = LocalStore(demo_copy)
    view = UnshardedView(inner, data_cache=LoadingCache(1 << 20), recheck_after=0.25)
    a, b = f"{ZARR_PATH}/c/0/0/0", f"{ZARR_PATH}/c/0/0/1"  # one shard
    await view.get(a)
    await view.get(b)
    remembered = view.get_now(a), view.get_now(b)
    await asyncio.sleep(0.3)
    inner.stats.reset()
    confirmed = view.get_now(a)
    assert confirmed is not remembered[0] and inner.stats.requests["get"] == 1
    assert view.get_now(b) is remembered[1] and inner.stats.requests["get"] == 1
    await asyncio.sleep(0.3)
    assert view.get_now(b) is not remembered[1]
    assert inner.stats.requests["get"] == 2, "aged again: confirmed by its own read"


async def test_a_remembered_answer_is_never_served_from_a_replaced_shard(demo_copy: Path) -> None:
    """A shard replaced behind the view: once ``recheck_after`` has passed, the
    remembered answer is gone (the read declines or gives the new bytes)."""
    view = UnshardedView(
        LocalStore(demo_copy), data_cache=LoadingCache(1 << 20), recheck_after=0.05
    )
    key, moved = f"{ZARR_PATH}/c/0/0/0", f"{ZARR_PATH}/c/0/0/4"
    old, new = await view.get(key), await view.get(moved)
    assert bytes(view.get_now(key).data) == old  # type: ignore[union-attr]
    shards = demo_copy / ZARR_PATH / "c" / "0" / "0"
    shutil.copy(shards / "1", shards / "replacement")
    (shards / "replacement").rename(shards / "0")
    await asyncio.sleep(0.1)
    now = view.get_now(key)
    assert now is WOULD_WAIT or bytes(now.data) == new  # type: ignore[union-attr]
    assert await view.get(key) == new
    assert bytes(view.get_now(key).data) == new  # type: ignore[union-attr]


async def test_head_now_answers_from_a_remembered_answer(demo_copy: Path) -> None:
    """``head_now`` (a viewer revalidating a chunk) gives the metadata of a remembered
    answer that still holds, equal to ``head``'s; otherwise it declines: nothing read
    yet, a folder's metadata invalidated, or the answer aged past ``recheck_after``
    without its index being confirmed."""
    inner = LocalStore(demo_copy)
    view = UnshardedView(inner, data_cache=LoadingCache(1 << 20), recheck_after=0.25)
    key = f"{ZARR_PATH}/c/0/0/0"
    assert view.head_now(key) is WOULD_WAIT
    await view.get(key)
    first = view.get_now(key)
    assert isinstance(first, GetResult)
    inner.stats.reset()
    now = view.head_now(key)
    head = await view.head(key)
    assert now is first.meta and head is not None
    assert (now.key, now.size, now.version) == (key, head.size, head.version)
    assert inner.stats.requests["get"] == 0
    await asyncio.sleep(0.3)
    assert view.head_now(key) is WOULD_WAIT, "aged: the index must be confirmed first"
    assert isinstance(view.get_now(key), GetResult)
    assert isinstance(view.head_now(key), ObjectMeta)
    view.folders.invalidate(f"{ZARR_PATH}/")
    assert view.head_now(key) is WOULD_WAIT
