"""A copy (``shard --to``) into its own source, or around it, is refused before any
request, however the two stores are written: compared as places (backend, endpoint as
the store applies it, bucket, prefix), not as strings."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncshard.backends import LocalStore, open_store
from asyncshard.backends.places import Place, normalize_endpoint, place_of
from asyncshard.convert import shard_store_async
from asyncshard.convert.command import shard
from asyncshard.errors import OverlappingStoresError
from tests.convert.helpers import make_array, snapshot, store_snapshot
from tests.servers.s3 import S3Server


@pytest.fixture(params=["trailing slash", "upper case", "AWS_ENDPOINT_URL"])
def to_options(
    request: pytest.FixtureRequest, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The destination's options: the fixture's endpoint ``E`` (the source's) written
    another way (for ``AWS_ENDPOINT_URL``, no endpoint option: the variable names it)."""
    options = s3_server.options()
    if request.param == "trailing slash":
        options["endpoint"] = s3_server.endpoint + "/"
    elif request.param == "upper case":
        options["endpoint"] = s3_server.endpoint.upper()
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", options.pop("endpoint"))
    return options


@pytest.fixture
async def source(s3_server: S3Server, tmp_path: Path) -> tuple[str, str]:
    """A Zarr array uploaded to ``s3://bucket/<fresh>/x``: ``(its URL, the prefix)``."""
    make_array(tmp_path / "x" / "arr", (8, 8), (2, 2), compressors=None)
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    async with open_store(f"s3://{s3_server.bucket}/{prefix}", **s3_server.options()) as store:
        for key, value in snapshot(tmp_path, skip=()).items():
            await store.set(key, value)
    return f"s3://{s3_server.bucket}/{prefix}/x", prefix


async def test_library_refuses_a_copy_inside_around_or_onto_its_source(
    s3_server: S3Server, source: tuple[str, str], to_options: dict[str, Any]
) -> None:
    url, prefix = source
    async with open_store(f"s3://{s3_server.bucket}/{prefix}", **s3_server.options()) as whole:
        before = await store_snapshot(whole)
        for dest in (f"{url}/y", f"{url}//", f"s3://{s3_server.bucket}/{prefix}"):
            with pytest.raises(OverlappingStoresError):
                await shard_store_async(
                    url,
                    2,
                    to=dest,
                    storage_options=s3_server.options(),
                    to_storage_options=to_options,
                )
        assert await store_snapshot(whole) == before  # nothing written
    apart = f"s3://{s3_server.bucket}/{prefix}/x-copy"  # a sibling, only a string prefix
    summary = await shard_store_async(
        url, 2, to=apart, storage_options=s3_server.options(), to_storage_options=to_options
    )
    assert summary.arrays_changed == ["arr"]


async def test_refused_before_any_request(s3_server: S3Server, source: tuple[str, str]) -> None:
    url, _ = source
    reader = open_store(url, **s3_server.options())
    writer = open_store(f"{url}/y", **s3_server.options(endpoint=s3_server.endpoint + "/"))
    async with reader, writer:
        with pytest.raises(OverlappingStoresError, match="inside one another"):
            await shard_store_async(reader, 2, to=writer)
        assert reader.stats.total_requests == writer.stats.total_requests == 0


def test_cli_refuses_a_copy_inside_its_source(
    s3_server: S3Server, source: tuple[str, str], to_options: dict[str, Any]
) -> None:
    url, _ = source
    creds = [f"access_key_id={s3_server.access_key}", f"secret_access_key={s3_server.secret_key}"]
    creds.append(f"region={s3_server.region}")
    args = [url, "2", "--endpoint", s3_server.endpoint, "--to", f"{url}/y", "-q"]
    for pair in creds:
        args += ["-o", pair, "--to-option", pair]
    if "endpoint" in to_options:
        args += ["--to-endpoint", to_options["endpoint"]]
    result = CliRunner().invoke(shard, args)
    assert result.exit_code == 2, result.output  # a usage error
    assert "inside one another" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    ("written", "normalized"),
    [
        ("http://Host:80/", "http://host"),
        ("HTTPS://HOST:443", "https://host"),
        ("https://host:8443//api/", "https://host:8443/api"),
        ("http://[::1]:80", "http://[::1]"),
        ("", ""),
    ],
)
def test_endpoints_are_compared_normalized(written: str, normalized: str) -> None:
    assert normalize_endpoint(written) == normalized


def test_places_of_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The place a store resolves to: a default port, a key's case or the
    environment variable make no difference; another server, bucket or prefix does."""
    keys: dict[str, Any] = {"access_key_id": "k", "secret_access_key": "s", "region": "x"}

    def place(url: str, **options: Any) -> Place | None:
        return place_of(open_store(url, {**keys, **options}))

    here = place("s3://b/p/x", endpoint="http://host")
    assert here == Place("s3", "http://host", "b", ("p", "x"))
    assert place("s3://b/p/x/", config={"AWS_ENDPOINT": "http://HOST:80/"}) == here
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://host:80")
    assert place("s3://b/p/x") == here
    assert here.contains(Place("s3", "http://host", "b", ("p", "x", "y")))
    for other in (
        place("s3://b/p/x", endpoint="http://host:8080"),
        place("s3://c/p/x"),
        place("s3://b/p/xy"),
    ):
        assert other is not None and not here.overlaps(other)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    local = place_of(LocalStore(tmp_path / "link" / "sub"))
    assert local == place_of(LocalStore(tmp_path / "real" / "sub"))
    assert local is not None and local.kind == "file"
    assert place_of(open_store("memory://")) is None
