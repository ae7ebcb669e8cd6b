"""open_store for cloud URLs: parsing, options, capabilities, and errors from real servers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from asyncshard.backends import open_store, supported_schemes
from asyncshard.backends.cloud import CLOUD_MAX_GAP, CLOUD_MAX_REQUEST, CloudStore
from asyncshard.backends.cloud.versions import decode_version, encode_version
from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.errors import (
    ConflictError,
    InvalidKeyError,
    ReadOnlyError,
    StoreConfigError,
    StoreConnectionError,
    UnknownSchemeError,
    UnsupportedOperationError,
)
from asyncshard.ranges import TO_THE_END, Offset, Range, Suffix
from tests.servers.fixtures import TEST_BUCKET, s3_store_on, unique_prefix, write_files
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.http_static import StaticServer
from tests.servers.s3 import ENDPOINT_VAR, S3Server, external_s3


def cloud(url: str, **options: object) -> CloudStore:
    store = open_store(url, **options)
    assert isinstance(store, CloudStore)
    return store


def allows_http(store: CloudStore) -> bool:
    """obstore reports client options back as strings."""
    return str(store._os.client_options["allow_http"]).lower() == "true"


@pytest.mark.parametrize(
    ("url", "kind", "bucket", "prefix"),
    [
        ("s3://bucket", "s3", "bucket", ""),
        ("s3://bucket/", "s3", "bucket", ""),
        ("s3://bucket/a/b/", "s3", "bucket", "a/b"),
        ("S3://bucket/a%20b", "s3", "bucket", "a b"),
        ("gs://bkt/data/x.zarr", "gs", "bkt", "data/x.zarr"),
        ("https://example.org/data/x.zarr/", "http", "example.org", "data/x.zarr"),
        ("http://127.0.0.1:8080/d", "http", "127.0.0.1:8080", "d"),
    ],
)
def test_url_parsing(url: str, kind: str, bucket: str, prefix: str) -> None:
    store = cloud(url, region="us-east-1") if kind == "s3" else cloud(url)
    assert (store.kind, store.bucket, store.prefix) == (kind, bucket, prefix)
    assert repr(store) == f"CloudStore({url!r})"
    assert (store.max_gap, store.max_request) == (CLOUD_MAX_GAP, CLOUD_MAX_REQUEST)


MINIMAL_OPTIONS: dict[str, dict[str, object]] = {
    "s3": {"region": "us-east-1"},
    "gs": {},
    "http": {},
    "az": {"account_name": "acct", "account_key": "a2V5"},
}


@pytest.mark.parametrize("scheme", sorted(CLOUD_SCHEMES))
def test_open_store_and_cloud_store_accept_the_same_schemes(scheme: str) -> None:
    """One table: every cloud scheme opens through open_store, as the same backend."""
    url = f"{scheme}://bucket/prefix"
    options = MINIMAL_OPTIONS[CLOUD_SCHEMES[scheme]]
    store = cloud(url, **options)
    assert store.kind == CLOUD_SCHEMES[scheme] == CloudStore(url, **options).kind
    assert scheme in supported_schemes()


async def test_gcs_scheme_reaches_the_gcs_fake(gcs_fake: FakeGCS) -> None:
    prefix = unique_prefix()
    store = open_store(
        f"gcs://{TEST_BUCKET}/{prefix}", service_account_key=service_account_key(gcs_fake.url)
    )
    await store.set("k", b"via gcs://")
    assert await store.get("k") == b"via gcs://"
    assert ("PUT", f"/{TEST_BUCKET}/{prefix}/k") in [(m, p) for m, p, _ in gcs_fake.log]


def test_azure_comes_from_obstore() -> None:
    store = cloud("az://container/prefix", account_name="acct", account_key="a2V5")
    assert store.kind == "az" and store.bucket == "container" and store.supports_writes
    assert store.credential_source == "the account_key option"


def test_capabilities_per_backend() -> None:
    s3 = cloud("s3://b", region="us-east-1")
    http = cloud("https://example.org/x")
    webdav = cloud("https://example.org/x", listing=True)
    rclone_like = cloud("s3://b", region="us-east-1", conditional_writes=False)
    assert (s3.supports_writes, s3.supports_listing, s3.supports_conditional_writes) == (
        True,
        True,
        True,
    )
    assert (http.supports_writes, http.supports_listing, http.supports_conditional_writes) == (
        False,
        False,
        False,
    )
    assert webdav.supports_listing and not webdav.supports_writes
    assert rclone_like.supports_writes and not rclone_like.supports_conditional_writes


def test_options_reach_obstore_and_the_planner() -> None:
    store = cloud(
        "s3://b/p",
        endpoint="http://127.0.0.1:9",
        region="eu-west-1",
        max_gap=1,
        max_request=2,
        max_concurrency=3,
        max_retries=7,
        timeout=1.5,
        connect_timeout="2s",
        retry_config={"retry_timeout": timedelta(seconds=9)},
    )
    assert (store.max_gap, store.max_request, store.max_concurrency) == (1, 2, 3)
    client = store._os.client_options
    retry = store._os.retry_config
    assert allows_http(store)  # the endpoint is http://: the user asked for it
    assert client["timeout"] in (timedelta(seconds=1.5), "1.5s", "1s 500ms")
    assert client["connect_timeout"] in ("2s", timedelta(seconds=2))
    assert retry["retry_timeout"] == timedelta(seconds=9)
    # the store retries itself, so that its request window sees every throttling answer
    assert store.retries == 7 and retry["max_retries"] == 0
    assert store._os.config["region"] == "eu-west-1"
    assert store._os.prefix == "p"


@pytest.mark.parametrize(
    ("url", "options", "allowed"),
    [
        ("s3://b", {"endpoint": "https://minio.example"}, False),
        ("s3://b", {"endpoint": "http://minio.local:9000"}, True),
        ("s3://b", {"endpoint": "http://minio.local:9000", "allow_http": False}, False),
        ("s3://b", {"endpoint": "https://x", "allow_http": True}, True),
        ("s3://b", {"endpoint": "https://x", "client_options": {"allow_http": True}}, True),
        ("https://example.org/d", {}, False),
        ("http://example.org/d", {}, True),
        ("gs://b", {"base_url": "http://127.0.0.1:1"}, True),
    ],
)
def test_plain_http_is_allowed_when_asked_for(
    url: str, options: dict[str, object], allowed: bool
) -> None:
    extra = {"region": "us-east-1"} if url.startswith("s3") else {}
    assert allows_http(cloud(url, **options, **extra)) is allowed


def test_endpoint_from_environment_allows_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://localhost:9000")
    assert allows_http(cloud("s3://b", region="us-east-1"))


def test_bad_urls_and_options() -> None:
    with pytest.raises(UnknownSchemeError):
        open_store("ftp://host/x")
    with pytest.raises(StoreConfigError, match="nonsense_option"):
        open_store("s3://b", nonsense_option=1)
    with pytest.raises(StoreConfigError, match="region"):
        open_store("https://example.org/x", region="us-east-1")
    with pytest.raises(StoreConfigError, match="cannot configure"):
        open_store("gs://b", service_account_key="{not json")
    with pytest.raises(StoreConfigError, match="no host"):
        open_store("http:///x")


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("s3://", {}, "no bucket"),
        ("s3:///prefix", {}, "no bucket"),
        ("gs://", {}, "no bucket"),
        ("az://", {"account_name": "acct"}, "no container"),
        ("s3://bad bucket/x", {}, "not a valid bucket name"),
        ("s3://user@bucket/x", {}, "not a valid bucket name"),
        ("gs://bucket:443/x", {}, "not a valid bucket name"),
        ("http://", {}, "no host"),
        ("https://:80/x", {}, "no valid host"),
        ("http://[::1/x", {}, "Invalid IPv6 URL"),
        ("s3://b", {"region": 1}, "cannot configure"),
        ("s3://b", {"timeout": "soon"}, "cannot configure"),
        ("s3://b", {"max_gap": -1}, "max_gap"),
        ("gs://b", {"max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_configuration_errors_are_store_config_errors(
    url: str, options: dict[str, object], message: str
) -> None:
    """Caught before any request, as one typed error (and still a ValueError)."""
    with pytest.raises(StoreConfigError, match=message) as err:
        open_store(url, **options)
    assert isinstance(err.value, ValueError)
    with pytest.raises(StoreConfigError):
        CloudStore(url, **options)  # type: ignore[arg-type]


def test_unsupported_scheme_in_cloud_store_is_a_config_error() -> None:
    with pytest.raises(StoreConfigError, match="unsupported scheme"):
        CloudStore("ftp://host/x")


@pytest.mark.parametrize(
    ("e_tag", "version"),
    [
        ('"abc"', None),
        ('"abc"', "1700000000000001"),
        ('W/"x#y"', None),
        (None, "3"),
        ('"e"', "3/L4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"),
    ],
)
def test_version_strings_round_trip(e_tag: str | None, version: str | None) -> None:
    encoded = encode_version(e_tag, version)
    assert encoded is not None
    assert decode_version(encoded) == (e_tag, version)


def test_credential_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(var, raising=False)
    assert "instance metadata" in cloud("s3://b", region="us-east-1").credential_source
    assert "anonymous" in cloud("s3://b", region="us-east-1", skip_signature=True).credential_source
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    assert "AWS_ACCESS_KEY_ID" in cloud("s3://b", region="us-east-1").credential_source
    assert "plain HTTP" in cloud("https://example.org").credential_source


# -- errors and quirks against real servers ----------------------------------------------


@pytest.fixture
def http_folder(http_server: StaticServer) -> tuple[str, Path]:
    prefix = unique_prefix()
    (http_server.root / prefix).mkdir()
    return f"{http_server.url}/{prefix}", http_server.root / prefix


async def test_http_is_read_only_and_cannot_list(http_folder: tuple[str, Path]) -> None:
    url, folder = http_folder
    await write_files(folder)({"a/b": b"hello"})
    store = open_store(url)
    assert await store.get("a/b", Range(1, 3)) == b"el"
    assert await store.get("a/missing") is None
    assert await store.head("a") is None  # a folder (403 here) is not an object
    with pytest.raises(ReadOnlyError, match="read-only"):
        await store.set("a/b", b"x")
    with pytest.raises(ReadOnlyError):
        await store.erase_values(["a/b"])
    with pytest.raises(UnsupportedOperationError, match="listing=True"):
        [k async for k in store.list_prefix("")]
    with pytest.raises(UnsupportedOperationError):
        await store.list_dir("a")
    with pytest.raises(InvalidKeyError):
        await store.get("../etc/passwd")


async def test_rclone_direct_ranged_200_falls_back_to_whole_reads(
    rclone_server: S3Server,
) -> None:
    """Without the fixing proxy, rclone's 200 answers to ranges still give right bytes."""
    store = s3_store_on(rclone_server, unique_prefix(), conditional_writes=False)
    blob = bytes(range(256)) * 40
    await store.set("k", blob)
    store.stats.reset()
    got = await store.get_partial_values(
        [("k", Range(10, 20)), ("k", Range(30, 40)), ("k", Offset(10_000)), ("k", Suffix(99_999))]
    )
    assert [bytes(v or b"") for v in got] == [blob[10:20], blob[30:40], blob[10_000:], blob]
    # The two close ranges (one request) and the offset: a rejected 200, then a whole
    # read each; the long suffix: a 416, a HEAD, then a whole read. All counted.
    assert dict(store.stats.requests) == {"get": 6, "head": 1}
    assert store.stats.bytes_returned == 20 + 240 + len(blob)


async def test_rclone_direct_whole_reads_stop_asking_for_ranges(rclone_server: S3Server) -> None:
    """A whole read is a range open to the end (one obstore call); rclone answers it
    with 200 (416 for an empty object), so the first read of a non-empty object costs
    that request and a plain GET, and the store then reads without ranges: one request
    each, as before."""
    store = s3_store_on(rclone_server, unique_prefix(), conditional_writes=False)
    await store.set_many([("empty", b""), ("a", b"abc"), ("b", b"bcd")])
    store.stats.reset()
    assert await store.get("empty") == b""  # 416, HEAD: the flag stays
    assert dict(store.stats.requests) == {"get": 1, "head": 1}
    assert bytes(await store.get("a") or b"") == b"abc"  # 200: a whole read, flag off
    assert dict(store.stats.requests) == {"get": 3, "head": 1}
    assert [bytes(v or b"") for v in await store.get_many(["a", "b"])] == [b"abc", b"bcd"]
    assert bytes(await store.get("b", Range(1, 2)) or b"") == b"c"  # ranged: 200, whole
    assert dict(store.stats.requests) == {"get": 7, "head": 1}


async def test_an_http_server_that_ignores_ranges_still_gives_the_right_bytes() -> None:
    """A plain HTTP server answering every GET with the whole object (200): obstore
    reports that as "Range request not supported"; the store reads whole and slices,
    and after the first whole answer for a non-empty object stops asking for ranges."""
    from aiohttp import web

    from tests.servers._threaded import ThreadedApp

    objects = {"a": bytes(range(100)), "empty": b""}
    ranged: list[str | None] = []

    async def factory() -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            ranged.append(request.headers.get("Range"))
            body = objects.get(request.match_info["key"])
            return web.Response(status=404) if body is None else web.Response(body=body)

        app = web.Application()
        app.router.add_get("/{key}", handle)
        return app

    server = ThreadedApp(factory, "ignores-ranges").start()
    try:
        async with open_store(server.url) as store:
            assert await store.get("empty") == b""  # whole either way: proves nothing
            assert bytes(await store.get("a", Range(10, 20)) or b"") == objects["a"][10:20]
            assert bytes(await store.get("a") or b"") == objects["a"]
            assert bytes(await store.get("a", Offset(95)) or b"") == objects["a"][95:]
            assert await store.get("missing") is None
            # a range, then the whole object, for "empty" and a[10:20]; then whole reads
            # are one plain GET, and a range is asked once more, answered whole, then
            # read whole (as rclone's are)
            assert dict(store.stats.requests) == {"get": 8}
            assert ranged == [
                f"bytes=0-{TO_THE_END - 1}",
                None,
                "bytes=10-19",
                None,
                None,
                "bytes=95-",
                None,
                None,
            ]
    finally:
        server.stop()


async def test_a_body_cut_short_after_a_range_answered_whole_is_a_connection_error() -> None:
    """A server that ignores ranges and breaks off every body: the one-call read, then
    the whole read, each broken; with no restarts allowed, a StoreConnectionError
    (the public type), after one request each."""
    from aiohttp import web

    from tests.servers._threaded import ThreadedApp

    async def factory() -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            response.content_length = 100
            await response.prepare(request)
            await response.write(bytes(50))
            assert request.transport is not None
            request.transport.close()  # 50 of the 100 bytes promised
            return response

        app = web.Application()
        app.router.add_get("/{key}", handle)
        return app

    server = ThreadedApp(factory, "cuts-bodies").start()
    try:
        async with open_store(server.url, max_retries=0) as store:
            for rng in (None, Range(0, 10)):
                with pytest.raises(StoreConnectionError) as raised:
                    await store.get("a", rng)
                assert raised.type is StoreConnectionError  # not the private subclass
            assert store.stats.requests["get"] >= 2
    finally:
        server.stop()


async def test_missing_objects_and_buckets(s3_server: S3Server) -> None:
    store = s3_store_on(s3_server, unique_prefix())
    assert await store.get("nope") is None
    assert await store.get("nope", Suffix(0)) is None
    assert await store.get("nope", Range(5, 5)) is None
    assert await store.head("nope") is None
    await store.erase_values(["nope"])  # deleting a missing object is fine
    v = await store.set("k", b"abc")
    assert (await store.get_object("k", Range(1, 1), if_match=v)) is not None
    with pytest.raises(ConflictError):
        await store.get_object("k", Suffix(0), if_match='"stale"')


async def test_external_endpoint_variable_points_the_suite_elsewhere(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ASYNCSHARD_TEST_S3_ENDPOINT (MinIO in compose.yaml) replaces SeaweedFS; try it on
    SeaweedFS itself."""
    monkeypatch.setenv(ENDPOINT_VAR, s3_server.endpoint)
    monkeypatch.setenv("ASYNCSHARD_TEST_S3_BUCKET", "made-by-the-env-var")
    monkeypatch.setenv("ASYNCSHARD_TEST_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("ASYNCSHARD_TEST_S3_SECRET_KEY", s3_server.secret_key)
    server = external_s3()
    assert server is not None and server.external and server.bucket == "made-by-the-env-var"
    store = s3_store_on(server, unique_prefix())
    await store.set("k", b"v")
    assert await store.get("k") == b"v"
    monkeypatch.delenv(ENDPOINT_VAR)
    assert external_s3() is None
