"""Request budgets against real servers, checked on the client (stats) and server (logs)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from asyncshard.cache import LoadingCache
from asyncshard.ranges import TO_THE_END, Offset, Range, Suffix, coalesce
from asyncshard.sharding.common import read_json
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.views import UnshardedView
from tests.cloud.conftest import Backend, range_span
from tests.zarr.helpers import array_doc

BLOB = bytes(i * 7 % 251 for i in range(1024 * 1024))


def gets(backend: Backend) -> list[str | None]:
    """The Range headers of the GETs the server saw."""
    return [rng for method, _, rng in backend.server_log() if method == "GET"]


async def test_four_close_ranges_cost_one_request(backend: Backend) -> None:
    store = backend.store
    await backend.seed({"shard": BLOB})
    backend.reset_log()
    store.stats.reset()
    ranges = [Range(1000, 1100), Range(1200, 1300), Range(2000, 2100), Range(5000, 5100)]
    values = await store.get_partial_values([("shard", r) for r in ranges])
    assert [bytes(v or b"") for v in values] == [BLOB[r.start : r.end] for r in ranges]
    assert store.stats.requests["get"] == 1 and store.stats.total_requests == 1
    assert store.stats.bytes_fetched == 4100
    assert [range_span(h) for h in gets(backend)] == [(1000, 5100)]


async def test_far_ranges_cost_one_request_each(backend: Backend) -> None:
    store = backend.store
    await backend.seed({"shard": BLOB})
    backend.reset_log()
    store.stats.reset()
    step = store.max_gap + 1000
    ranges = [Range(s, s + 64) for s in (0, step, 2 * step)]
    values = await store.get_partial_values([("shard", r) for r in ranges])
    assert [bytes(v or b"") for v in values] == [BLOB[r.start : r.end] for r in ranges]
    assert store.stats.requests["get"] == 3 and store.stats.total_requests == 3
    assert sorted(range_span(h) for h in gets(backend)) == [(r.start, r.end) for r in ranges]


@pytest.mark.parametrize("max_request", [1000, 4096, 20_000])
async def test_coalesced_requests_never_exceed_max_request(
    backend: Backend, max_request: int
) -> None:
    store = backend.store
    store.max_gap, store.max_request = 1 << 20, max_request  # gaps never split; size does
    await backend.seed({"shard": BLOB})
    backend.reset_log()
    store.stats.reset()
    # 60 ranges of 300 bytes with 50-byte gaps: 21,000 contiguous-ish bytes to cover
    ranges = [Range(10_000 + i * 350, 10_000 + i * 350 + 300) for i in range(60)]
    values = await store.get_partial_values([("shard", r) for r in ranges[::-1]])
    assert [bytes(v or b"") for v in values] == [BLOB[r.start : r.end] for r in ranges[::-1]]
    planned = coalesce(ranges, max_gap=store.max_gap, max_request=max_request)
    assert store.stats.requests["get"] == len(planned) > (1 if max_request < 21_000 else 0)
    spans = sorted(range_span(h) for h in gets(backend))
    assert spans == [(p.start, p.end) for p in planned]
    assert all(end - start <= max_request for start, end in spans)  # on the server's side
    assert store.stats.bytes_fetched == sum(end - start for start, end in spans)


async def test_a_single_range_larger_than_max_request_is_sent_whole(backend: Backend) -> None:
    store = backend.store
    store.max_request = 1000
    await backend.seed({"shard": BLOB})
    backend.reset_log()
    store.stats.reset()
    value = await store.get("shard", Range(100, 5100))
    assert bytes(value or b"") == BLOB[100:5100]
    assert [range_span(h) for h in gets(backend)] == [(100, 5100)]  # not split, by design


async def test_whole_object_and_warm_head_costs(backend: Backend) -> None:
    store = backend.store
    await backend.seed({"shard": BLOB})
    backend.reset_log()
    store.stats.reset()
    meta = await store.head("shard")
    whole = await store.get("shard")
    assert meta is not None and meta.size == len(BLOB) and bytes(whole or b"") == BLOB
    assert isinstance(whole, memoryview)  # zero-copy view of obstore's buffer
    assert dict(store.stats.requests) == {"head": 1, "get": 1}
    assert [m for m, _, _ in backend.server_log()] == ["HEAD", "GET"]


async def test_reads_without_a_version_are_one_ranged_get(backend: Backend) -> None:
    """``get``, ``get_many`` and unconditioned ranges go out as one ranged GET each (one
    obstore call, one completion); a whole object as a range open to the end."""
    store = backend.store
    await backend.seed({"shard": BLOB, "empty": b"", "small": b"xyz"})
    backend.reset_log()
    store.stats.reset()
    assert bytes(await store.get("shard") or b"") == BLOB
    assert bytes(await store.get("shard", Range(10, 20)) or b"") == BLOB[10:20]
    assert bytes(await store.get("shard", Offset(len(BLOB) - 5)) or b"") == BLOB[-5:]
    assert [bytes(v or b"") for v in await store.get_many(["small", "shard"])] == [b"xyz", BLOB]
    assert dict(store.stats.requests) == {"get": 5}
    to_the_end = f"{TO_THE_END - 1}"
    whole = f"bytes=0-{to_the_end}"
    tail = f"bytes={len(BLOB) - 5}-{to_the_end}"
    assert gets(backend) == [whole, "bytes=10-19", tail, whole, whole]
    # an empty object has no range to give: a 416 is followed by a HEAD (a 200 would be
    # by a plain GET), and the store keeps asking for ranges
    backend.reset_log()
    store.stats.reset()
    assert await store.get("empty") == b""
    assert bytes(await store.get("small") or b"") == b"xyz"
    assert dict(store.stats.requests) == {"get": 2, "head": 1}
    assert store.stats.requests == Counter(request_kind(m, p) for m, p, _ in backend.server_log())
    assert gets(backend) == [whole, whole]
    # past the end: a 416, then a HEAD, as with two-call reads
    store.stats.reset()
    assert await store.get("small", Offset(10)) == b""
    assert await store.get("small", Offset(TO_THE_END + 10)) == b""  # no range: GET, HEAD
    assert dict(store.stats.requests) == {"get": 2, "head": 2}
    # a read that wants the version is a plain GET
    backend.reset_log()
    result = await store.get_object("small")
    assert result is not None and result.meta.size == 3
    assert gets(backend) == [None]


async def test_keys_the_views_pass_through_are_one_ranged_get(backend: Backend) -> None:
    """A key that is no chunk of a sharded view (``ZarrShardedStore``, ``UnshardedView``)
    is read by ``get`` and ``get_many`` as the wrapped store's one ranged GET (one
    completion), not as a ``get_object`` (two); so is a JSON document by ``read_json``."""
    store = backend.store
    doc = json.dumps(array_doc([64, 64], [4, 8], [1, 1])).encode()
    await backend.seed({"ds/zarr.json": doc, "ds/notes.txt": b"xyz", "readme": BLOB[:100]})
    sharded = await ZarrShardedStore.open(store, "ds", cache=LoadingCache())
    view = UnshardedView(store)
    await view.head("readme")  # the view learns the root folder holds no dataset
    backend.reset_log()
    store.stats.reset()
    assert await sharded.get("ds/notes.txt") == b"xyz"
    assert await sharded.get("ds/notes.txt", Range(1, 2)) == b"y"
    assert [bytes(v or b"") for v in await sharded.get_many(["ds/notes.txt"])] == [b"xyz"]
    assert await view.get("readme") == BLOB[:100]
    assert await view.get("missing") is None
    assert await read_json(store, "ds/zarr.json") == json.loads(doc)
    whole = f"bytes=0-{TO_THE_END - 1}"
    assert gets(backend) == [whole, "bytes=1-1", whole, whole, whole, whole]
    assert dict(store.stats.requests) == {"get": 6}
    # a read that wants the version still is a plain GET through the view
    backend.reset_log()
    result = await view.get_object("readme")
    assert result is not None and bytes(result.data) == BLOB[:100]
    assert gets(backend) == [None]


def request_kind(method: str, path: str) -> str:
    """What ``stats.requests`` calls a request the server saw."""
    if method == "GET" and path.strip("/").count("/") == 0:
        return "list"  # S3 and GCS list with a GET on the bucket
    if method == "POST" and path.strip("/").count("/") == 0:
        return "delete"  # S3 DeleteObjects
    return {"GET": "get", "HEAD": "head", "PUT": "put", "DELETE": "delete"}[method]


async def test_counters_are_the_requests_the_server_saw(backend: Backend) -> None:
    """Every verb, including the paths that send extra or other requests than asked."""
    store = backend.store
    await backend.seed({"shard": BLOB[:1000], "dir/x": b"xyz"})
    backend.reset_log()
    store.stats.reset()
    assert await store.get("shard", Range(10, 10)) == b""  # zero length: a HEAD
    assert await store.get("shard", Range(5000, 6000)) == b""  # past the end: 416, HEAD
    assert bytes(await store.get("shard", Suffix(5000)) or b"") == BLOB[:1000]
    assert bytes(await store.get("shard", Offset(990)) or b"") == BLOB[990:1000]
    assert await store.get("missing") is None
    assert await store.head("shard") is not None
    await store.get_partial_values([("shard", Range(0, 10)), ("shard", Range(20, 30))])
    if store.supports_writes:
        await store.set("new", b"1")
        await store.erase_values(["new", "dir/x", "never-written"])
    if store.supports_listing:
        await store.list_dir("")
        assert [k async for k in store.list_prefix("")] == ["shard"]
    seen = Counter(request_kind(m, p) for m, p, _ in backend.server_log())
    assert store.stats.requests == seen
