"""Zarr conversions on S3 (SeaweedFS, or the endpoint named by ASYNCSHARD_TEST_S3_ENDPOINT)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from asyncshard.backends import open_store
from asyncshard.convert import reshard_async, shard_store_async, unshard_store_async
from asyncshard.store import Store
from tests.convert.helpers import (
    Crash,
    CrashingStore,
    assert_readable,
    make_array,
    snapshot,
    store_snapshot,
)
from tests.servers.s3 import S3Server


async def download(store: Store, prefix: str, folder: Path) -> Path:
    """Copy the objects below ``prefix`` to a fresh local folder (to read them back)."""
    for key, value in (await store_snapshot(store, prefix)).items():
        path = folder / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
    return folder


async def test_round_trip_on_s3(s3_server: S3Server, tmp_path: Path) -> None:
    local = tmp_path / "src" / "vol" / "arr"
    data = make_array(local, (30, 25, 6), (6, 6, 3), compressors=None)
    original = snapshot(tmp_path / "src", skip=())
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    url = f"s3://{s3_server.bucket}/{prefix}"
    options = s3_server.options()
    async with open_store(url, **options) as store:
        for key, value in original.items():
            await store.set(key, value)

        summary = await shard_store_async(url, 2, storage_options=options)
        assert summary.arrays_changed == ["vol/arr"]
        assert_readable(await download(store, "vol/arr/", tmp_path / "sharded"), data)

        with pytest.raises(Crash):  # interrupted on S3, then resumed
            await reshard_async(CrashingStore(store, puts=3), (4, 2, 3))
        assert_readable(await download(store, "vol/arr/", tmp_path / "crashed"), data)
        summary = await reshard_async(url, (4, 2, 3), storage_options=options)
        assert summary.arrays[0].resumed
        assert_readable(await download(store, "vol/arr/", tmp_path / "resharded"), data)

        await unshard_store_async(url, storage_options=options)
        after = await store_snapshot(store)
        assert {k: v for k, v in after.items() if not k.endswith("zarr.json")} == {
            k: v for k, v in original.items() if not k.endswith("zarr.json")
        }
        assert_readable(await download(store, "vol/arr/", tmp_path / "flat"), data)
        if s3_server.external:
            await store.erase_prefix("")


async def test_ome_v2_into_s3_and_back(s3_server: S3Server, tmp_path: Path) -> None:
    """OME-Zarr 0.4 on disk -> sharded 0.5 on S3 (the destination's options apart from
    the source's) -> a second copy from S3 to disk: equal data, valid 0.5."""
    import zarr
    from ome_zarr_models.v05.image import Image

    from asyncshard.convert.migrate import copy_store
    from asyncshard.convert.plan import Request
    from tests.convert.ome_data import assert_same_arrays, write_image_04

    source = tmp_path / "image.zarr"
    write_image_04(source)
    url = f"s3://{s3_server.bucket}/t-{uuid.uuid4().hex[:12]}/image.ome.zarr"
    options = s3_server.options()
    summary = await shard_store_async(
        source, "auto", to=url, to_storage_options=options, shard_bytes=64 * 1024
    )
    assert len(summary.arrays_changed) == 6  # 3 image and 3 label levels
    async with open_store(url, **options) as store:
        copied = await download(store, "", tmp_path / "downloaded")
    assert_same_arrays(source, copied)
    Image.from_zarr(zarr.open_group(str(copied), mode="r"))

    back = tmp_path / "back.zarr"  # v3 sharded on S3 as the source: repacked into 2x shards
    again = await copy_store(url, back, Request(2), storage_options=options)
    assert len(again.arrays_changed) == 6
    assert_same_arrays(source, back)
