"""Nothing outside the served root is reachable; writes need --writable and the token."""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

import asyncshard.server.writes as writes_module
from asyncshard.backends import open_store
from asyncshard.errors import InvalidKeyError
from asyncshard.server import AppConfig, make_app
from asyncshard.server.keys import REMEMBERED_PATH, key_url_path, parse_path
from tests.http_app.conftest import DATA, Served, ServeFactory, raw_request

SECRET = b"TOPSECRET-outside-the-root"
TOKEN = "s3cr3t-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

TRAVERSALS = [
    "/../secret",
    "/../../../../etc/passwd",
    "/%2e%2e/secret",
    "/%2E%2E/%2e%2e/secret",
    "/d/%2e%2e/%2e%2e/secret",
    "/d/..%2f..%2fsecret",
    "/..%2fsecret",
    "/d%2F..%2F..%2Fsecret",
    "/%2F..%2Fsecret",
    "//etc/passwd",
    "///secret",
    "/%2fetc%2fpasswd",
    "/d/..%5c..%5csecret",
    "/d\\..\\..\\secret",
    "/..\\secret",
    "/obj%00",
    "/d/a%00/../../secret",
    "/./obj",
    "/%2e/obj",
    "/d/./a",
    "/d//a",
    "/%ff%fe",
    "/.%2e/secret",
    "/%2e./secret",
]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"  # next to the served folder tmp_path/root
    path.write_bytes(SECRET)
    return path


@pytest.mark.parametrize("target", TRAVERSALS)
async def test_traversal_reads_never_escape(served: Served, secret: Path, target: str) -> None:
    for method in ("GET", "HEAD"):
        status, _, body = await raw_request(served.url, method, target)
        assert status in (400, 404), (method, target, status)
        assert SECRET not in body
    status, _, body = await raw_request(served.url, "GET", target + "/")
    assert status in (400, 404) and SECRET not in body


async def test_absolute_form_and_odd_targets(served: Served, secret: Path) -> None:
    for target in ("http://127.0.0.1/../secret", "*", "secret"):
        status, _, body = await raw_request(served.url, "GET", target)
        assert status in (400, 404), target
        assert SECRET not in body


async def test_symlink_out_of_the_root_is_refused(served: Served, secret: Path) -> None:
    os.symlink(secret, served.root / "link")
    os.symlink(secret.parent, served.root / "dirlink")
    for target in ("/link", "/dirlink/secret", "/dirlink/"):
        status, _, body = await raw_request(served.url, "GET", target)
        assert status in (400, 404), target
        assert SECRET not in body


@pytest.mark.parametrize("target", TRAVERSALS[:14])
async def test_traversal_writes_never_escape(
    serve: ServeFactory, secret: Path, tmp_path: Path, target: str
) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        before = sorted(p.name for p in tmp_path.iterdir())
        for method in ("PUT", "DELETE"):
            status, _, _ = await raw_request(s.url, method, target, {**AUTH, "Content-Length": "0"})
            assert status in (400, 404), (method, target, status)
    assert secret.read_bytes() == SECRET
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_parse_path() -> None:
    assert parse_path("/") == parse_path("/?list=json")
    assert parse_path("/a/b").key == "a/b" and not parse_path("/a/b").is_dir
    assert parse_path("/a/b/").key == "a/b/" and parse_path("/a/b/").is_dir
    assert parse_path("/sp%20ace/na%C3%AFve").key == "sp ace/naïve"
    assert parse_path("/a+b").key == "a+b"
    assert key_url_path("sp ace/a#b?") == "/sp%20ace/a%23b%3F"
    assert parse_path(key_url_path("sp ace/a#b?")).key == "sp ace/a#b?"


@pytest.mark.parametrize("length", [REMEMBERED_PATH - 1, REMEMBERED_PATH, REMEMBERED_PATH + 1])
def test_parse_path_is_the_same_whether_remembered_or_not(length: int) -> None:
    """Short paths' answers are remembered, long ones parsed each time: both the same,
    and an invalid path refused every time it comes."""
    folder = "/" + "d" * (length - 3) + "/x"
    assert len(folder) == length
    for _ in range(2):
        assert parse_path(folder) == (folder[1:], False)
        assert parse_path(folder + "/") == (folder[1:] + "/", True)
        with pytest.raises(InvalidKeyError):
            parse_path(folder[: length - 2] + "/..")


# -- writes --------------------------------------------------------------------------------


async def test_read_only_server_refuses_writes(served: Served, http: aiohttp.ClientSession) -> None:
    for method in ("PUT", "DELETE"):
        async with http.request(method, f"{served.url}/obj", data=b"x", headers=AUTH) as r:
            assert r.status == 405
            assert "PUT" not in r.headers["Allow"] and "GET" in r.headers["Allow"]
    assert (served.root / "obj").read_bytes() == DATA
    async with http.post(f"{served.url}/obj", data=b"x") as r:
        assert r.status == 405


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": TOKEN},
        {"Authorization": "Bearer"},
    ],
)
async def test_writes_without_the_token_are_401(
    serve: ServeFactory, http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        for method in ("PUT", "DELETE"):
            async with http.request(method, f"{s.url}/obj", data=b"x", headers=headers) as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert (s.root / "obj").read_bytes() == DATA


async def test_token_is_compared_in_constant_time(
    serve: ServeFactory, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(writes_module.hmac, "compare_digest", spy)
    async with serve(writable=True, token=TOKEN) as s:
        bad = {"Authorization": "Bearer no"}
        async with http.put(f"{s.url}/new", data=b"x", headers=bad) as r:
            assert r.status == 401
    assert calls == [(b"no", TOKEN.encode())]


async def test_writes_with_the_token(serve: ServeFactory, http: aiohttp.ClientSession) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        async with http.put(f"{s.url}/new/key.bin", data=b"hello", headers=AUTH) as r:
            assert r.status == 201
            etag = r.headers["ETag"]
        async with http.get(f"{s.url}/new/key.bin") as r:
            assert (await r.read(), r.headers["ETag"]) == (b"hello", etag)
        async with http.put(f"{s.url}/new/key.bin", data=b"again", headers=AUTH) as r:
            assert r.status == 204
        assert (s.root / "new" / "key.bin").read_bytes() == b"again"
        async with http.delete(f"{s.url}/new/key.bin", headers=AUTH) as r:
            assert r.status == 204
        async with http.get(f"{s.url}/new/key.bin") as r:
            assert r.status == 404
        async with http.put(f"{s.url}/new/", data=b"x", headers=AUTH) as r:
            assert r.status == 400


async def test_conditional_writes(serve: ServeFactory, http: aiohttp.ClientSession) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        async with http.get(f"{s.url}/obj") as r:
            etag = r.headers["ETag"]
        create_only = {**AUTH, "If-None-Match": "*"}
        async with http.put(f"{s.url}/obj", data=b"x", headers=create_only) as r:
            assert r.status == 412
        async with http.put(f"{s.url}/fresh", data=b"x", headers=create_only) as r:
            assert r.status == 201
        async with http.put(f"{s.url}/obj", data=b"x", headers={**AUTH, "If-Match": '"old"'}) as r:
            assert r.status == 412
        assert (s.root / "obj").read_bytes() == DATA
        async with http.put(f"{s.url}/obj", data=b"y", headers={**AUTH, "If-Match": etag}) as r:
            assert r.status == 204
        async with http.delete(f"{s.url}/obj", headers={**AUTH, "If-Match": etag}) as r:
            assert r.status == 412, "the ETag changed with the write"
        assert (s.root / "obj").read_bytes() == b"y"


async def test_preflight_of_a_writable_server(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    async with serve(writable=True, token=TOKEN) as s:
        headers = {"Origin": "https://x.example", "Access-Control-Request-Method": "PUT"}
        async with http.options(f"{s.url}/obj", headers=headers) as r:
            methods = r.headers["Access-Control-Allow-Methods"]
            assert "PUT" in methods and "DELETE" in methods
            allowed = r.headers["Access-Control-Allow-Headers"].lower()
            assert "authorization" in allowed and "content-type" in allowed


async def test_upload_size_limit(serve: ServeFactory, http: aiohttp.ClientSession) -> None:
    async with serve(writable=True, token=TOKEN, max_upload=1000) as s:
        async with http.put(f"{s.url}/big", data=b"x" * 2000, headers=AUTH) as r:
            assert r.status == 413
        assert not (s.root / "big").exists()


def test_make_app_refuses_unsafe_configurations(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    with pytest.raises(ValueError, match="token"):
        make_app(store, AppConfig(writable=True))
    with pytest.raises(ValueError, match="read-only"):
        make_app(store, AppConfig(writable=True, token=TOKEN, unshard=True))
    with pytest.raises(ValueError, match="writes"):
        make_app(open_store("http://127.0.0.1:9/x"), AppConfig(writable=True, token=TOKEN))


async def test_upload_size_limit_without_a_declared_length(
    serve: ServeFactory, http: aiohttp.ClientSession
) -> None:
    """A chunked body is counted as it arrives: past the limit, 413 and nothing written."""

    async def chunked(parts: int) -> AsyncIterator[bytes]:
        for _ in range(parts):
            yield b"x" * 400

    async with serve(writable=True, token=TOKEN, max_upload=1000) as s:
        async with http.put(f"{s.url}/big", data=chunked(5), headers=AUTH) as r:
            assert r.status == 413
        async with http.put(f"{s.url}/small", data=chunked(2), headers=AUTH) as r:
            assert r.status == 201
        assert not (s.root / "big").exists()
        assert (s.root / "small").read_bytes() == b"x" * 800


async def expect_continue(url: str, headers: dict[str, str], body: bytes) -> list[int]:
    """A PUT with ``Expect: 100-continue``: the statuses the server sent, in order.
    The body goes out only after a ``100 Continue`` (else the final answer is read)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = [
        "PUT /expected HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: close",
        "Expect: 100-continue",
        f"Content-Length: {len(body)}",
    ]
    head += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    statuses = [await asyncio.wait_for(reader.readline(), 5)]
    if b" 100 " in statuses[0]:
        await reader.readline()  # the blank line ending the interim answer
        writer.write(body)
        statuses.append(await asyncio.wait_for(reader.readline(), 5))
    writer.close()
    return [int(line.split()[1]) for line in statuses]


async def test_expect_continue_only_for_acceptable_uploads(serve: ServeFactory) -> None:
    """``100 Continue`` is sent once the request is authorised and within the limit; a
    refused one gets its final answer at once, before any body is sent."""
    async with serve(writable=True, token=TOKEN, max_upload=1000) as s:
        assert await expect_continue(s.url, AUTH, b"y" * 10) == [100, 201]
        assert (s.root / "expected").read_bytes() == b"y" * 10
        assert await expect_continue(s.url, {}, b"z" * 10) == [401]
        assert await expect_continue(s.url, AUTH, b"z" * 2000) == [413]
        assert (s.root / "expected").read_bytes() == b"y" * 10
