"""Conditional writes and reads: S3 ETags on SeaweedFS, GCS generations on the GCS fake."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.errors import ConflictError, UnsupportedOperationError
from asyncshard.ranges import Range
from asyncshard.store import Store
from tests.servers.fixtures import gcs_store_on, s3_store_on, unique_prefix
from tests.servers.gcs_fake import FakeGCS
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        return s3_store_on(server, unique_prefix())
    fake: FakeGCS = request.getfixturevalue("gcs_fake")
    return gcs_store_on(fake, unique_prefix())


async def test_create_only_fails_when_the_object_exists(store: Store) -> None:
    v1 = await store.set("shard", b"first", if_absent=True)
    assert v1
    with pytest.raises(ConflictError) as info:
        await store.set("shard", b"second", if_absent=True)
    assert info.value.key == "shard"
    result = await store.get_object("shard")
    assert result is not None and bytes(result.data) == b"first"
    assert result.meta.version == v1  # nothing was overwritten, not even with equal bytes


async def test_stale_version_update_conflicts_and_overwrites_nothing(store: Store) -> None:
    v1 = await store.set("shard", b"v1")
    v2 = await store.set("shard", b"v2", if_match=v1)
    assert v2 and v2 != v1
    with pytest.raises(ConflictError):
        await store.set("shard", b"v3", if_match=v1)
    result = await store.get_object("shard")
    assert result is not None and bytes(result.data) == b"v2" and result.meta.version == v2
    with pytest.raises(ConflictError):
        await store.set("never-written", b"x", if_match=v1)
    assert await store.get("never-written") is None


async def test_conditional_read_detects_a_rewrite(store: Store) -> None:
    v1 = await store.set("shard", b"0123456789")
    ok = await store.get_object("shard", Range(2, 4), if_match=v1)
    assert ok is not None and bytes(ok.data) == b"23"
    await store.set("shard", b"abcdefghij")
    with pytest.raises(ConflictError):
        await store.get_object("shard", Range(2, 4), if_match=v1)
    with pytest.raises(ConflictError):  # also on the HEAD path of an empty range
        await store.get_object("shard", Range(20, 30), if_match=v1)


async def test_racing_creators_exactly_one_wins(store: Store) -> None:
    async def create(i: int) -> bool:
        try:
            await store.set("lock", str(i).encode(), if_absent=True)
            return True
        except ConflictError:
            return False

    wins = await asyncio.gather(*(create(i) for i in range(8)))
    assert sum(wins) == 1
    assert await store.get("lock") == str(wins.index(True)).encode()


async def test_gcs_versions_carry_the_generation(gcs_fake: FakeGCS) -> None:
    store = gcs_store_on(gcs_fake, unique_prefix())
    v1 = await store.set("k", b"same bytes")
    v2 = await store.set("k", b"same bytes")
    # Same MD5 ETag, new generation: the version must still change.
    etag1, _, gen1 = (v1 or "").rpartition("#")
    etag2, _, gen2 = (v2 or "").rpartition("#")
    assert etag1 == etag2 and gen1 != gen2 and gen1.isdigit()
    with pytest.raises(ConflictError):
        await store.set("k", b"other", if_match=v1)  # x-goog-if-generation-match: gen1


async def test_rclone_refuses_conditional_writes_instead_of_overwriting(
    rclone_server: S3Server, rclone_fixed: FaultProxy
) -> None:
    store = s3_store_on(
        rclone_server, unique_prefix(), endpoint=rclone_fixed.url, conditional_writes=False
    )
    assert not store.supports_conditional_writes
    v1 = await store.set("k", b"one")
    with pytest.raises(UnsupportedOperationError, match="conditional_writes=False"):
        await store.set("k", b"two", if_absent=True)
    with pytest.raises(UnsupportedOperationError):
        await store.set("k", b"two", if_match=v1)
    assert await store.get("k") == b"one"
    # rclone ignores If-Match on GET too; the store checks the answer's ETag instead.
    await store.set("k", b"three")
    with pytest.raises(ConflictError):
        await store.get_object("k", if_match=v1)
