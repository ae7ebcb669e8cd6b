"""A missing bucket is a typed error naming it, never an empty store or a missing key."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from asyncshard.cli import cli
from asyncshard.errors import BucketNotFoundError
from tests.servers.fixtures import s3_store_on
from tests.servers.s3 import S3Server


@pytest.fixture
def missing(s3_server: S3Server) -> S3Server:
    return S3Server(
        name="missing bucket",
        endpoint=s3_server.endpoint,
        bucket="no-such-bucket-here",
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        region=s3_server.region,
    )


async def test_reads_listings_and_writes_name_the_missing_bucket(missing: S3Server) -> None:
    store = s3_store_on(missing, "prefix")
    for call in (
        lambda: store.get("k"),
        lambda: store.set("k", b"v"),
        lambda: store.list_dir(""),
        lambda: store.get_partial_values([("k", None)]),
    ):
        with pytest.raises(BucketNotFoundError, match="no-such-bucket-here"):
            await call()
    with pytest.raises(BucketNotFoundError, match="no-such-bucket-here"):
        _ = [key async for key in store.list_prefix("")]


async def test_a_missing_key_in_an_existing_bucket_is_still_none(s3_server: S3Server) -> None:
    store = s3_store_on(s3_server, "prefix")
    assert await store.get("no-such-key") is None
    assert await store.list_dir("no-such-folder/") == ([], [])
    for spelled in ("logs/ContainerNotFound.txt", "a<Code>NoSuchBucket</Code>b"):
        assert await store.get(spelled) is None  # a key that spells a code: still missing
        assert await store.get_object(spelled) is None


@pytest.mark.parametrize("args", [("ls",), ("ls", "-r"), ("cat", "k"), ("rm", "k")])
def test_the_cli_fails_naming_the_bucket(missing: S3Server, args: tuple[str, ...]) -> None:
    env = {
        "AWS_ENDPOINT_URL": missing.endpoint,
        "AWS_ACCESS_KEY_ID": missing.access_key,
        "AWS_SECRET_ACCESS_KEY": missing.secret_key,
        "AWS_REGION": missing.region,
    }
    command, *rest = args
    url = f"s3://{missing.bucket}/data"
    result = CliRunner().invoke(cli, [command, url, *rest], env=env)
    assert result.exit_code == 1, result.output
    assert "BucketNotFoundError" in result.stderr and "no-such-bucket-here" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
