"""Wrong credentials give StorePermissionError quickly, naming bucket and credential source."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from asyncshard.backends import open_store
from asyncshard.errors import StoreAuthenticationError, StorePermissionError
from asyncshard.store import Store
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.s3 import S3Server

Op = Callable[[Store], Awaitable[object]]


async def _list(store: Store) -> list[str]:
    return [k async for k in store.list_prefix("")]


OPS: dict[str, Op] = {
    "get": lambda s: s.get("k"),
    "head": lambda s: s.head("k"),
    "set": lambda s: s.set("k", b"x"),
    "erase": lambda s: s.erase_values(["k"]),
    "list": _list,
    "list_dir": lambda s: s.list_dir(""),
}


@pytest.fixture
async def wrong_secret(rclone_server: S3Server) -> AsyncIterator[Store]:
    """rclone directly (no proxy): the server itself refuses the signature."""
    async with open_store(
        f"s3://{rclone_server.bucket}/p",
        **rclone_server.options(secret_access_key="not-the-secret"),
    ) as store:
        yield store


@pytest.mark.parametrize("op", sorted(OPS))
async def test_wrong_secret_on_rclone_is_a_permission_error(wrong_secret: Store, op: str) -> None:
    start = time.monotonic()
    with pytest.raises(StorePermissionError) as info:
        await OPS[op](wrong_secret)
    assert time.monotonic() - start < 5  # refused, not retried until a timeout
    message = str(info.value)
    assert "bucket 'asyncshard-test'" in message
    assert "access_key_id/secret_access_key options" in message
    assert isinstance(info.value, PermissionError)  # also a builtin PermissionError
    # the answer's body says the signature is wrong; a HEAD's answer has no body
    assert isinstance(info.value, StoreAuthenticationError) == (op != "head"), message


async def test_unknown_access_key_from_environment(
    rclone_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobody-known")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "whatever-secret")
    store = open_store(f"s3://{rclone_server.bucket}", endpoint=rclone_server.endpoint)
    with pytest.raises(StorePermissionError, match="AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"):
        await store.head("k")


@pytest.fixture
def locked_gcs() -> Iterator[FakeGCS]:
    fake = FakeGCS(token="the-right-token")
    fake.create_bucket("locked")
    yield fake.start()
    fake.stop()


async def test_gcs_wrong_token_is_a_permission_error(locked_gcs: FakeGCS) -> None:
    good = open_store("gs://locked/p", base_url=locked_gcs.url, bearer_token="the-right-token")
    await good.set("k", b"ok")
    assert await good.get("k") == b"ok"
    bad = open_store("gs://locked/p", base_url=locked_gcs.url, bearer_token="stale-token")
    with pytest.raises(StorePermissionError, match=r"bucket 'locked'.*bearer_token option"):
        await bad.get("k")
    anonymous = open_store("gs://locked/p", service_account_key=service_account_key(locked_gcs.url))
    with pytest.raises(StorePermissionError, match="service_account_key option"):
        await anonymous.set("k", b"x")
