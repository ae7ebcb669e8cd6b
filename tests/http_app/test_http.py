"""The server's HTTP semantics, checked with a plain client (RFC 9110 and CORS)."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from asyncshard.backends import LocalStore
from asyncshard.backends.local import descriptors
from asyncshard.ranges import ByteRange
from asyncshard.server import AppConfig, make_app
from asyncshard.server.reads import KEPT_BODY
from asyncshard.store import GetResult, NowResult
from tests.http_app.conftest import DATA, FILES, Served, ServeFactory, seed

SIZE = len(DATA)


async def get(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> tuple[int, CIMultiDictProxy[str], bytes]:
    async with http.get(url, headers=headers or {}) as r:
        return r.status, r.headers, await r.read()


# -- whole objects, HEAD, 404 --------------------------------------------------------------


async def test_get_whole_object(served: Served, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{served.url}/obj", headers={"Accept-Encoding": "gzip, br"}) as r:
        body = await r.read()
        assert r.status == 200
        assert body == DATA
        assert r.headers["Content-Length"] == str(SIZE)
        assert r.headers["Accept-Ranges"] == "bytes"
        assert r.headers["Content-Type"] == "application/octet-stream"
        assert re.fullmatch(r'"[^"]+"', r.headers["ETag"])
        assert r.headers["Last-Modified"].endswith(" GMT")
        assert r.headers["Cache-Control"] == "no-cache"
        assert "Content-Encoding" not in r.headers
        assert "Transfer-Encoding" not in r.headers


async def test_json_is_served_as_json_without_compression(
    served: Served, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{served.url}/meta.json", headers={"Accept-Encoding": "gzip"}) as r:
        assert r.headers["Content-Type"] == "application/json"
        assert "Content-Encoding" not in r.headers
        assert await r.read() == FILES["meta.json"]


async def test_head_has_exact_length_and_no_body(
    served: Served, http: aiohttp.ClientSession
) -> None:
    for key, size in [("obj", SIZE), ("empty", 0)]:
        async with http.head(f"{served.url}/{key}") as r:
            assert r.status == 200
            assert r.headers["Content-Length"] == str(size)
            assert await r.read() == b""
    async with http.head(f"{served.url}/obj", headers={"Range": "bytes=0-9"}) as r:
        assert r.status == 200, "Range is ignored on HEAD"
        assert r.headers["Content-Length"] == str(SIZE)
        assert "Content-Range" not in r.headers


@pytest.mark.parametrize("path", ["/missing", "/d/missing", "/obj/below-a-file", "/d", "/nope/"])
async def test_missing_is_404(served: Served, http: aiohttp.ClientSession, path: str) -> None:
    for method in ("GET", "HEAD"):
        async with http.request(method, served.url + path) as r:
            assert r.status == 404, (method, path)
            assert r.headers["Access-Control-Allow-Origin"] == "*", "errors carry CORS too"


async def test_empty_object(served: Served, http: aiohttp.ClientSession) -> None:
    status, headers, body = await get(http, f"{served.url}/empty")
    assert (status, headers["Content-Length"], body) == (200, "0", b"")


# -- ranges --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-9", 0, 10),
        ("bytes=100-355", 100, 356),
        ("bytes=5-5", 5, 6),
        ("bytes=10000-", 10000, SIZE),
        ("bytes=0-", 0, SIZE),
        ("bytes=-24", SIZE - 24, SIZE),
        ("bytes=-99999", 0, SIZE),  # longer than the object: all of it
        ("bytes=10000-99999", 10000, SIZE),  # past the end: clamped
        ("BYTES=1-2", 1, 3),  # the unit is case-insensitive
        ("bytes= 1-2 ", 1, 3),
        pytest.param("bytes=" + "0" * 5000 + "7-8", 7, 9, id="5000-leading-zeros"),
        ("bytes=0-9999999999999999999", 0, SIZE),  # 19 digits: clamped
        ("bytes=-9999999999999999999", 0, SIZE),
    ],
)
async def test_single_range(
    served: Served, http: aiohttp.ClientSession, header: str, start: int, end: int
) -> None:
    status, headers, body = await get(http, f"{served.url}/obj", {"Range": header})
    assert status == 206
    assert body == DATA[start:end]
    assert headers["Content-Range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert headers["Content-Length"] == str(end - start)
    assert headers["Accept-Ranges"] == "bytes"
    assert "Content-Encoding" not in headers


@pytest.mark.parametrize(
    ("key", "header"),
    [
        ("obj", f"bytes={SIZE}-"),
        ("obj", f"bytes={SIZE}-{SIZE + 10}"),
        ("obj", "bytes=-0"),
        ("obj", f"bytes={SIZE + 5}-,-0"),
        ("empty", "bytes=0-0"),
        ("empty", "bytes=-5"),
        ("obj", "bytes=9999999999999999999-"),  # 19 digits: representable, beyond the end
        ("obj", "bytes=9223372036854775808-9999999999999999999"),
    ],
)
async def test_unsatisfiable_range_is_416(
    served: Served, http: aiohttp.ClientSession, key: str, header: str
) -> None:
    status, headers, _ = await get(http, f"{served.url}/{key}", {"Range": header})
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{len(FILES[key])}"


@pytest.mark.parametrize(
    "header",
    [
        "bytes=5-2",
        "bytes=x-y",
        "bytes=1-2-3",
        "bytes=-",
        "bytes=",
        "bytes=+1-2",
        "bytes=0x1-2",
        "items=0-1",
        "bytes 0-1",
        "bytes=0-1;",
        "bytes=1 -2",
        "=0-1",
        "bytes=0-1,5-2",
        # numbers too long to represent (int() refuses more than 4300 digits): ignored,
        # never a 500; see asyncshard.server.ranges
        pytest.param("bytes=" + "1" * 5000 + "-", id="5000-digit-first"),
        pytest.param("bytes=0-" + "1" * 5000, id="5000-digit-last"),
        pytest.param("bytes=-" + "1" * 5000, id="5000-digit-suffix"),
        pytest.param("bytes=" + "1" * 4000 + "-" + "2" * 4000, id="4000-digit-both"),
        pytest.param("bytes=0-1," + "9" * 5000 + "-", id="5000-digit-second"),
        "bytes=" + "1" * 20 + "-",  # more than 19 significant digits
    ],
)
async def test_malformed_range_is_ignored(
    served: Served, http: aiohttp.ClientSession, header: str
) -> None:
    status, headers, body = await get(http, f"{served.url}/obj", {"Range": header})
    assert (status, len(body)) == (200, SIZE)
    assert body == DATA
    assert "Content-Range" not in headers


def parse_multipart(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    boundary = content_type.split("boundary=", 1)[1].encode()
    parts = []
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        assert data.endswith(b"\r\n")
        fields = dict(line.split(": ", 1) for line in head.decode().strip("\r\n").split("\r\n"))
        parts.append((fields["Content-Range"], data[:-2]))
    return parts


async def test_multiple_ranges_are_multipart(served: Served, http: aiohttp.ClientSession) -> None:
    status, headers, body = await get(
        http, f"{served.url}/obj", {"Range": "bytes=5000-5009, 0-1,-3"}
    )
    assert status == 206
    assert headers["Content-Type"].startswith("multipart/byteranges; boundary=")
    assert headers["Content-Length"] == str(len(body))
    assert "Content-Range" not in headers
    assert parse_multipart(headers["Content-Type"], body) == [
        (f"bytes 0-1/{SIZE}", DATA[0:2]),
        (f"bytes 5000-5009/{SIZE}", DATA[5000:5010]),
        (f"bytes {SIZE - 3}-{SIZE - 1}/{SIZE}", DATA[-3:]),
    ]


async def test_overlapping_ranges_merge_into_one_part(
    served: Served, http: aiohttp.ClientSession
) -> None:
    for header in ("bytes=0-5,3-9", "bytes=0-4,5-9", f"bytes=0-9,{SIZE + 1}-"):
        status, headers, body = await get(http, f"{served.url}/obj", {"Range": header})
        assert status == 206, header
        assert headers["Content-Range"] == f"bytes 0-9/{SIZE}"
        assert body == DATA[:10]


async def test_too_many_ranges_are_ignored(served: Served, http: aiohttp.ClientSession) -> None:
    header = "bytes=" + ",".join(f"{i * 10}-{i * 10}" for i in range(101))
    status, _, body = await get(http, f"{served.url}/obj", {"Range": header})
    assert (status, body) == (200, DATA)


# -- validators and conditional requests ---------------------------------------------------


async def test_etag_and_if_none_match(served: Served, http: aiohttp.ClientSession) -> None:
    _, headers, _ = await get(http, f"{served.url}/obj")
    etag = headers["ETag"]
    for method in ("GET", "HEAD"):
        for value in (etag, f'"other", {etag}', "*", f"W/{etag}"):
            async with http.request(
                method, f"{served.url}/obj", headers={"If-None-Match": value}
            ) as r:
                assert r.status == 304, (method, value)
                assert await r.read() == b""
                assert r.headers["ETag"] == etag
                assert r.headers["Cache-Control"] == "no-cache"
    status, _, body = await get(http, f"{served.url}/obj", {"If-None-Match": '"other"'})
    assert (status, body) == (200, DATA)


async def test_if_modified_since(served: Served, http: aiohttp.ClientSession) -> None:
    _, headers, _ = await get(http, f"{served.url}/obj")
    modified = headers["Last-Modified"]
    later = format_datetime(datetime.now(UTC) + timedelta(days=1), usegmt=True)
    earlier = format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)
    assert (await get(http, f"{served.url}/obj", {"If-Modified-Since": modified}))[0] == 304
    assert (await get(http, f"{served.url}/obj", {"If-Modified-Since": later}))[0] == 304
    assert (await get(http, f"{served.url}/obj", {"If-Modified-Since": earlier}))[0] == 200
    assert (await get(http, f"{served.url}/obj", {"If-Modified-Since": "garbage"}))[0] == 200
    # If-None-Match takes precedence over If-Modified-Since
    both = {"If-None-Match": '"other"', "If-Modified-Since": later}
    assert (await get(http, f"{served.url}/obj", both))[0] == 200


async def test_if_match_and_if_unmodified_since(
    served: Served, http: aiohttp.ClientSession
) -> None:
    _, headers, _ = await get(http, f"{served.url}/obj")
    etag = headers["ETag"]
    earlier = format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)
    assert (await get(http, f"{served.url}/obj", {"If-Match": etag}))[0] == 200
    assert (await get(http, f"{served.url}/obj", {"If-Match": '"stale"'}))[0] == 412
    assert (await get(http, f"{served.url}/obj", {"If-Match": f"W/{etag}"}))[0] == 412
    assert (await get(http, f"{served.url}/obj", {"If-Unmodified-Since": earlier}))[0] == 412


async def test_if_range(served: Served, http: aiohttp.ClientSession) -> None:
    _, headers, _ = await get(http, f"{served.url}/obj")
    etag, modified = headers["ETag"], headers["Last-Modified"]
    for validator in (etag, modified):
        status, _, body = await get(
            http, f"{served.url}/obj", {"Range": "bytes=0-3", "If-Range": validator}
        )
        assert (status, body) == (206, DATA[:4])
    status, _, body = await get(
        http, f"{served.url}/obj", {"Range": "bytes=0-3", "If-Range": '"stale"'}
    )
    assert (status, body) == (200, DATA)


async def test_etag_changes_with_the_object(served: Served, http: aiohttp.ClientSession) -> None:
    _, before, _ = await get(http, f"{served.url}/obj")
    (served.root / "obj").write_bytes(b"new content")
    status, after, body = await get(http, f"{served.url}/obj", {"If-None-Match": before["ETag"]})
    assert (status, body) == (200, b"new content")
    assert after["ETag"] != before["ETag"]


async def test_plain_gets_carry_the_headers_of_the_current_object(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Whole-body answers reuse their headers per key (the server remembers them) only
    while the object is the same one: a replaced object gets its own."""
    _, first, _ = await get(http, f"{served.url}/obj")
    _, again, _ = await get(http, f"{served.url}/obj")
    assert again["ETag"] == first["ETag"]
    os.utime(served.root / "obj", (0, 0))  # the same bytes, another modification time
    _, touched, body = await get(http, f"{served.url}/obj")
    assert body == DATA
    assert touched["Last-Modified"] == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert touched["ETag"] != first["ETag"]
    (served.root / "obj").write_bytes(b"new content")
    status, after, body = await get(http, f"{served.url}/obj")
    assert (status, body) == (200, b"new content")
    assert after["ETag"] not in (first["ETag"], touched["ETag"])
    assert after["Content-Length"] == str(len(b"new content"))


@pytest.mark.skipif(not descriptors.NOWAIT, reason="no RWF_NOWAIT or /proc: no head_now here")
@pytest.mark.parametrize("size", [SIZE, 300_000, KEPT_BODY, KEPT_BODY + 1])
async def test_a_file_answered_again_is_checked_not_read_again(
    serve: ServeFactory, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """A file of up to ``KEPT_BODY`` bytes answered whole is answered again from memory
    after one metadata check (``head_now``: a ``stat``; larger than a write slice, it is
    written in slices as any body), never after it changed: rewritten in place with the
    same size, replaced or deleted, the next answer is the current object. A larger
    file is read each time. (The store remembers a file's metadata from its second
    opening on, so the body kept is the second answer's.)"""
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)  # the seeded files count as settled
    content = (DATA * (size // len(DATA) + 1))[:size]
    async with serve() as served:
        path = served.root / "obj"
        path.write_bytes(content)
        requests = served.store.stats.requests
        _, first, _ = await get(http, f"{served.url}/obj")
        assert (await get(http, f"{served.url}/obj"))[1]["ETag"] == first["ETag"]
        before = dict(requests)
        for _ in range(3):
            status, again, body = await get(http, f"{served.url}/obj")
            assert (status, body, again["ETag"]) == (200, content, first["ETag"])
            assert again["Content-Length"] == str(size)
        if size <= KEPT_BODY:
            assert requests["get"] == before["get"]
            assert requests["head"] == before.get("head", 0) + 3
        else:
            assert requests["get"] >= before["get"] + 3
        time.sleep(0.02)  # file times move in clock ticks (a few ms): let the change show
        with open(path, "r+b") as f:  # in place: the same inode and size, other bytes
            f.write(b"INPLACE!")
        status, rewritten, body = await get(http, f"{served.url}/obj")
        assert (status, body) == (200, b"INPLACE!" + content[8:])
        assert rewritten["ETag"] != first["ETag"]
        (served.root / "new").write_bytes(b"replaced")
        os.rename(served.root / "new", path)
        assert (await get(http, f"{served.url}/obj"))[::2] == (200, b"replaced")
        assert (await get(http, f"{served.url}/obj"))[::2] == (200, b"replaced")
        path.unlink()
        assert (await get(http, f"{served.url}/obj"))[0] == 404


@pytest.mark.skipif(not descriptors.NOWAIT, reason="no RWF_NOWAIT or /proc: no head_now here")
async def test_a_revalidation_is_answered_without_a_thread(
    serve: ServeFactory, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conditional ``GET`` (a browser revalidating with ``If-None-Match``, as
    ``Cache-Control: no-cache`` asks) takes the metadata from ``head_now`` (a ``stat``
    on the loop), not from ``head`` in a worker thread, and is still exact: 304 while
    the file is the same, 200 with the new bytes once it changed, 404 once deleted."""
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)
    async with serve() as served:
        store = served.store
        assert isinstance(store, LocalStore)
        heads: list[str] = []
        real = store._head

        async def counting(key: str) -> Any:
            heads.append(key)
            return await real(key)

        monkeypatch.setattr(store, "_head", counting)
        _, first, _ = await get(http, f"{served.url}/obj")
        revalidate = {"If-None-Match": first["ETag"]}
        for _ in range(3):
            status, headers, body = await get(http, f"{served.url}/obj", revalidate)
            assert (status, body, headers["ETag"]) == (304, b"", first["ETag"])
        fresh = await get(http, f"{served.url}/meta.json", {"If-None-Match": '"x"'})
        assert fresh[::2] == (200, FILES["meta.json"]), "never read before: opened on the loop"
        assert heads == []
        time.sleep(0.02)  # file times move in clock ticks (a few ms): let the change show
        (served.root / "obj").write_bytes(b"changed")
        status, headers, body = await get(http, f"{served.url}/obj", revalidate)
        assert (status, body) == (200, b"changed") and headers["ETag"] != first["ETag"]
        (served.root / "obj").unlink()
        assert (await get(http, f"{served.url}/obj", revalidate))[0] == 404
        assert heads == []


@pytest.mark.parametrize("settled_ns", [None, 0])
async def test_files_are_read_each_time_when_recent_or_without_a_data_cache(
    serve: ServeFactory,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    settled_ns: int | None,
) -> None:
    """A file changed less than ``SETTLED_NS`` ago may change again within one tick of
    the file system's clock unseen: it is read for every answer. So is every file with
    ``data_cache_bytes=0``."""
    options: dict[str, int] = {}
    if settled_ns is not None:
        monkeypatch.setattr(descriptors, "SETTLED_NS", settled_ns)
        options["data_cache_bytes"] = 0
    async with serve(**options) as served:
        requests = served.store.stats.requests
        await get(http, f"{served.url}/obj")
        before = requests["get"]
        for _ in range(3):
            assert (await get(http, f"{served.url}/obj"))[::2] == (200, DATA)
        assert requests["get"] == before + 3


@pytest.mark.parametrize("value", ["public, max-age=86400, immutable", None])
async def test_cache_control_is_configurable(
    serve: ServeFactory, http: aiohttp.ClientSession, value: str | None
) -> None:
    async with serve(cache_control=value) as s:
        _, headers, _ = await get(http, f"{s.url}/obj")
        assert headers.get("Cache-Control") == value


# -- CORS ----------------------------------------------------------------------------------


async def test_cors_preflight_allows_range(served: Served, http: aiohttp.ClientSession) -> None:
    headers = {
        "Origin": "https://viewer.example",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range",
    }
    async with http.options(f"{served.url}/obj", headers=headers) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        methods = {m.strip() for m in r.headers["Access-Control-Allow-Methods"].split(",")}
        assert {"GET", "HEAD"} <= methods and not {"PUT", "DELETE"} & methods
        allowed = {h.strip().lower() for h in r.headers["Access-Control-Allow-Headers"].split(",")}
        assert {"range", "if-none-match", "if-match"} <= allowed
        assert "authorization" not in allowed
        assert int(r.headers["Access-Control-Max-Age"]) > 0


async def test_cors_preflight_private_network(served: Served, http: aiohttp.ClientSession) -> None:
    headers = {
        "Origin": "https://neuroglancer-demo.appspot.com",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Private-Network": "true",
    }
    async with http.options(f"{served.url}/obj", headers=headers) as r:
        assert r.headers["Access-Control-Allow-Private-Network"] == "true"


async def test_cors_expose_headers_on_every_answer(
    served: Served, http: aiohttp.ClientSession
) -> None:
    for path, headers in [
        ("/obj", {}),
        ("/obj", {"Range": "bytes=0-1"}),
        ("/missing", {}),
        ("/d/", {}),
        ("/obj", {"Range": f"bytes={SIZE}-"}),
    ]:
        _, got, _ = await get(http, served.url + path, {"Origin": "https://x.example", **headers})
        assert got["Access-Control-Allow-Origin"] == "*"
        exposed = {h.strip().lower() for h in got["Access-Control-Expose-Headers"].split(",")}
        assert {"content-range", "content-length", "content-encoding", "etag"} <= exposed


async def test_cors_specific_origins(serve: ServeFactory, http: aiohttp.ClientSession) -> None:
    async with serve(allow_origin="https://a.example, https://b.example") as s:
        _, headers, _ = await get(http, f"{s.url}/obj", {"Origin": "https://b.example"})
        assert headers["Access-Control-Allow-Origin"] == "https://b.example"
        assert "Origin" in headers.getall("Vary")
        _, headers, _ = await get(http, f"{s.url}/obj", {"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in headers
    async with serve(allow_origin="") as s:
        _, headers, _ = await get(http, f"{s.url}/obj", {"Origin": "https://b.example"})
        assert not any(h.startswith("Access-Control") for h in headers)


async def test_overlong_names_are_404(served: Served, http: aiohttp.ClientSession) -> None:
    for path in ("/" + "x" * 1000, "/d/" + "y" * 300 + "/z", "/" + "w" * 5000 + "/"):
        async with http.get(served.url + path) as r:
            assert r.status == 404, path[:20]


async def test_streamed_answers_carry_the_common_headers(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    """Answers whose headers go out before the handler returns (streamed bodies,
    multipart ranges, HEAD) get CORS and ``nosniff`` like the others."""
    big = bytes(range(256)) * 1024  # 256 KiB: streamed in pieces
    b = "https://b.example"
    for allow, origin, vary in [("*", "*", False), (b, b, True)]:
        async with serve(allow_origin=allow, piece_size=64 * 1024) as s:
            (s.root / "big").write_bytes(big)
            for method, headers in [
                ("GET", {}),
                ("GET", {"Range": "bytes=0-1,100000-100001"}),
                ("HEAD", {}),
            ]:
                headers = {"Origin": b, **headers}
                async with http.request(method, f"{s.url}/big", headers=headers) as r:
                    body = await r.read()
                    assert r.status in (200, 206)
                    assert r.headers["Access-Control-Allow-Origin"] == origin
                    assert r.headers["X-Content-Type-Options"] == "nosniff"
                    assert ("Origin" in r.headers.getall("Vary", [])) == vary
                    if method == "GET" and "Range" not in headers:
                        assert body == big


class Exploding(LocalStore):
    """A store whose reads fail with an error that is not asyncshard's."""

    async def get_object(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> GetResult | None:
        raise RuntimeError("unexpected")

    def get_now(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> NowResult:
        raise RuntimeError("unexpected")


async def test_an_unexpected_failure_is_a_500_with_cors(
    serve: ServeFactory, http: aiohttp.ClientSession, tmp_path: Path, caplog: Any
) -> None:
    (tmp_path / "exploding").mkdir()
    (tmp_path / "exploding" / "obj").write_bytes(b"x")
    async with serve(store=Exploding(tmp_path / "exploding")) as s:
        ids = set()
        for _ in range(2):  # and the server carries on
            status, headers, body = await get(http, f"{s.url}/obj")
            assert status == 500
            assert headers["Access-Control-Allow-Origin"] == "*"
            assert b"unexpected failure" in body
            assert b"RuntimeError" not in body, "internals stay in the server's log"
            request_id = headers["X-Request-Id"]
            assert f"(request id {request_id})".encode() in body
            assert f"request {request_id}: GET /obj: RuntimeError: unexpected" in caplog.text
            ids.add(request_id)
        assert len(ids) == 2, "an id per request"
        async with http.get(f"{s.url}/") as r:
            assert r.status == 200, "listings do not read objects"


async def test_the_application_serves_under_an_aiohttp_app_runner(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """``make_app``'s application embedded the aiohttp way (router, ``AppRunner``)
    answers like ``asyncshard serve``: the same handler, headers and limits."""
    seed(tmp_path, FILES)
    app = make_app(LocalStore(tmp_path), AppConfig(writable=True, token="t", max_upload=100))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        status, headers, body = await get(http, f"{url}/obj")
        assert (status, body) == (200, DATA)
        assert headers["Access-Control-Allow-Origin"] == "*"
        assert headers["X-Content-Type-Options"] == "nosniff"
        status, headers, _ = await get(http, f"{url}/missing")
        assert (status, headers["Access-Control-Allow-Origin"]) == (404, "*")
        auth = {"Authorization": "Bearer t"}
        async with http.put(f"{url}/new", data=b"n" * 101, headers=auth) as r:
            assert r.status == 413
        async with http.put(f"{url}/new", data=b"n" * 100, headers=auth) as r:
            assert r.status == 201
        assert (tmp_path / "new").read_bytes() == b"n" * 100
    finally:
        await runner.cleanup()
