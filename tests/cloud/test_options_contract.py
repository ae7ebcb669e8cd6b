"""The options contract (docs/cloud.md), once over every public entry point that takes a
location.

Each entry point is called on a prefix of the S3 test server, reached only through a
logging proxy, with its storage options given as keywords, as one ``storage_options``
dict, as a ready asyncshard Store, and as an obstore store; each must do its job through
the proxy. With an unknown option (or any option next to a ready Store) it must raise a
``TypeError`` naming the option before a single request reaches the proxy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from obstore.store import S3Store

from asyncshard import PrecomputedVolume, Uint64ShardedStore, ZarrShardedStore, open_sharded
from asyncshard.backends import LocalStore, open_store
from asyncshard.convert import (
    Request,
    convert_store,
    rebuild_manifest,
    rebuild_manifest_async,
    reshard,
    reshard_async,
    shard_precomputed,
    shard_precomputed_async,
    shard_store,
    shard_store_async,
    unshard_precomputed,
    unshard_precomputed_async,
    unshard_store,
    unshard_store_async,
)
from asyncshard.errors import UnknownOptionError
from asyncshard.sharding import ShardedScale
from asyncshard.store import Store
from asyncshard.zarr_python import ZarrStore
from tests.convert.helpers import make_array
from tests.convert.test_precomputed import make_volume
from tests.servers.fixtures import unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server

UINT64_SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 0,
    "hash": "identity",
    "minishard_bits": 0,
    "shard_bits": 0,
    "minishard_index_encoding": "raw",
    "data_encoding": "raw",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Every object of a small dataset: a flat and a sharded Zarr array, an unsharded and
    a sharded precomputed volume, and a sharded id directory."""
    root = tmp_path_factory.mktemp("dataset")
    make_array(root / "flat", (16, 16), (4, 4), sparse=False)
    make_array(root / "sharded", (16, 16), (4, 4), sparse=False)
    shard_store(str(root), 2, ["sharded"], separator=".")  # keys c.i.j
    make_volume(root / "vol")
    make_volume(root / "svol")
    shard_precomputed(str(root / "svol"))
    (root / "ids").mkdir()
    (root / "ids" / "info").write_text(json.dumps({"sharding": UINT64_SHARDING}))
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass
class World:
    server: S3Server
    proxy: FaultProxy
    prefix: str

    def url(self, sub: str = "") -> str:
        return f"s3://{self.server.bucket}/{self.prefix}" + (f"/{sub}" if sub else "")

    def options(self) -> dict[str, Any]:
        """Storage options that reach the server only through the proxy."""
        return self.server.options(endpoint=self.proxy.url)

    def obstore(self, sub: str = "") -> S3Store:
        return S3Store(
            self.server.bucket,
            prefix=f"{self.prefix}/{sub}".rstrip("/"),
            endpoint=self.proxy.url,
            access_key_id=self.server.access_key,
            secret_access_key=self.server.secret_key,
            region=self.server.region,
            client_options={"allow_http": True},
        )


@pytest.fixture
async def world(s3_server: S3Server, dataset: dict[str, bytes]) -> AsyncIterator[World]:
    prefix = unique_prefix()
    async with open_store(f"s3://{s3_server.bucket}/{prefix}", **s3_server.options()) as direct:
        await asyncio.gather(*(direct.set(k, v) for k, v in dataset.items()))
    proxy = FaultProxy(s3_server.endpoint).start()
    yield World(s3_server, proxy, prefix)
    proxy.stop()


# -- the entry points: (location below the prefix, call, check of the result) ------------------

Call = Callable[..., Awaitable[Any]]


def in_thread(func: Callable[..., Any]) -> Call:
    """A synchronous entry point, called off the event loop as a script would."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(func, *args, **kwargs)

    return call


async def _get(store: Store) -> bytes | None:
    return await store.get("flat/zarr.json")


async def _zarr_read(location: Any, **opts: Any) -> float:
    import zarr.api.asynchronous as za

    array = await za.open_array(store=ZarrStore(location, **opts), path="flat", mode="r")
    return float(np.asarray(await array.getitem(...)).sum())


async def _open_store(location: Any, **opts: Any) -> Any:
    return await _get(open_store(location, **opts))


async def _open_sharded(location: Any, **opts: Any) -> Any:
    return await (await open_sharded(location, "sharded", **opts)).get("sharded/c.3.3")


async def _zarr_sharded(location: Any, **opts: Any) -> Any:
    return await (await ZarrShardedStore.open(location, "sharded", **opts)).get("sharded/c.3.3")


async def _uint64(location: Any, **opts: Any) -> Any:
    store = await Uint64ShardedStore.open(location, "ids", **opts)
    return store.spec.to_json() == UINT64_SHARDING or None


async def _volume(location: Any, **opts: Any) -> Any:
    return (await PrecomputedVolume.open(location, "svol", **opts)).sharded_scale_keys or None


async def _scale(location: Any, **opts: Any) -> Any:
    scale = await ShardedScale.open(location, "1_1_1", path="svol", **opts)
    return await scale.list_chunk_names() or None


def _converted(expected: str) -> Callable[[Any], Any]:
    def check(summary: Any) -> Any:
        return [a.path for a in summary.arrays if a.action == "converted"] == [expected] or None

    return check


ENTRY_POINTS: dict[str, tuple[str, Call, Callable[[Any], Any]]] = {
    "open_store": ("", _open_store, lambda got: got),
    "open_sharded": ("", _open_sharded, lambda got: got),
    "ZarrShardedStore.open": ("", _zarr_sharded, lambda got: got),
    "Uint64ShardedStore.open": ("", _uint64, lambda got: got),
    "PrecomputedVolume.open": ("", _volume, lambda got: got),
    "ShardedScale.open": ("", _scale, lambda got: got),
    "ZarrStore": ("", _zarr_read, lambda total: total > 0 or None),
    "shard_store_async": (
        "", lambda loc, **o: shard_store_async(loc, 2, ["flat"], **o), _converted("flat")
    ),
    "shard_store": ("", lambda loc, **o: in_thread(shard_store)(loc, 2, ["flat"], **o),
                    _converted("flat")),
    "unshard_store_async": (
        "", lambda loc, **o: unshard_store_async(loc, ["sharded"], **o), _converted("sharded")
    ),
    "unshard_store": ("", lambda loc, **o: in_thread(unshard_store)(loc, ["sharded"], **o),
                      _converted("sharded")),
    "reshard_async": (
        "", lambda loc, **o: reshard_async(loc, 1, ["sharded"], **o), _converted("sharded")
    ),
    "reshard": ("", lambda loc, **o: in_thread(reshard)(loc, 1, ["sharded"], **o),
                _converted("sharded")),
    "convert_store": (
        "", lambda loc, **o: convert_store(loc, Request(2), ["flat"], **o), _converted("flat")
    ),
    "rebuild_manifest_async": (
        "",
        lambda loc, **o: rebuild_manifest_async(loc, ["sharded"], **o),
        lambda s: s.arrays[0].action == "manifest" or None,
    ),
    "rebuild_manifest": (
        "",
        lambda loc, **o: in_thread(rebuild_manifest)(loc, ["sharded"], **o),
        lambda s: s.arrays[0].action == "manifest" or None,
    ),
    "shard_precomputed_async": (
        "vol", lambda loc, **o: shard_precomputed_async(loc, None, ["1_1_1"], **o),
        _converted("1_1_1"),
    ),
    "shard_precomputed": (
        "vol", lambda loc, **o: in_thread(shard_precomputed)(loc, None, ["1_1_1"], **o),
        _converted("1_1_1"),
    ),
    "unshard_precomputed_async": (
        "svol", lambda loc, **o: unshard_precomputed_async(loc, ["1_1_1"], **o),
        _converted("1_1_1"),
    ),
    "unshard_precomputed": (
        "svol", lambda loc, **o: in_thread(unshard_precomputed)(loc, ["1_1_1"], **o),
        _converted("1_1_1"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("form", ["keywords", "storage_options", "store", "obstore"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
async def test_every_entry_point_takes_every_form(world: World, entry: str, form: str) -> None:
    sub, call, check = ENTRY_POINTS[entry]
    if form == "keywords":
        got = await call(world.url(sub), **world.options())
    elif form == "storage_options":
        got = await call(world.url(sub), storage_options=world.options())
    elif form == "store":
        async with open_store(world.url(sub), **world.options()) as store:
            got = await call(store)
    else:
        got = await call(world.obstore(sub))
    assert check(got), got
    assert world.proxy.log, "the requests went to the endpoint given"


@pytest.mark.parametrize("form", ["keywords", "storage_options", "store"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
async def test_an_unknown_option_is_refused_before_any_request(
    world: World, entry: str, form: str
) -> None:
    sub, call, _ = ENTRY_POINTS[entry]
    with pytest.raises(TypeError, match="endpiont") as raised:
        if form == "keywords":
            await call(world.url(sub), **world.options(), endpiont="http://127.0.0.1:9")
        elif form == "storage_options":
            options = {**world.options(), "endpiont": "http://127.0.0.1:9"}
            await call(world.url(sub), storage_options=options)
        else:  # an option next to a ready Store has nowhere to go
            async with open_store(world.url(sub), **world.options()) as store:
                await call(store, endpiont="http://127.0.0.1:9")
    assert isinstance(raised.value, UnknownOptionError)
    assert world.proxy.log == [], "no request was made"


async def test_keywords_and_storage_options_add_up_and_may_not_disagree(world: World) -> None:
    options = world.options()
    endpoint = options.pop("endpoint")
    store = open_store(world.url(), storage_options=options, endpoint=endpoint)
    assert await _get(store) is not None and world.proxy.log
    with pytest.raises(TypeError, match="'endpoint' given twice"):
        open_store(world.url(), storage_options=world.options(), endpoint="http://127.0.0.1:9")


def test_an_obstore_local_store_is_a_local_store(tmp_path: Path) -> None:
    from obstore.store import LocalStore as ObstoreLocal

    store = open_store(ObstoreLocal(str(tmp_path)))
    assert isinstance(store, LocalStore) and store.root == tmp_path


def test_a_local_folder_refuses_cloud_options(tmp_path: Path) -> None:
    with pytest.raises(UnknownOptionError, match=r"'endpoint'.*a cloud store needs a URL"):
        open_store(str(tmp_path), endpoint="http://127.0.0.1:9")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retry_config": {"max_retris": 1}}, "max_retris"),  # obstore would ignore it
        ({"retry_config": {"backoff": {"bse": 2}}}, "backoff.bse"),
        ({"client_options": {"timeot": "1s"}}, "timeot"),
    ],
)
def test_nested_options_are_checked_too(options: dict[str, Any], named: str) -> None:
    with pytest.raises(UnknownOptionError, match=named):
        open_store("s3://bucket/x", endpoint="http://127.0.0.1:9", **options)
