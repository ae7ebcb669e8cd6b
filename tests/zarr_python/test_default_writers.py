"""Concurrent zarr-python writers of one shard lose nothing through a default ZarrStore.

zarr-python's sharding codec writes part of a shard by reading it whole, changing its
chunks and writing it back; the default (pass-through) ZarrStore makes that write
conditional on the version read and merges the changed inner chunks onto the current
shard on a conflict. Writers here are asyncio tasks, threads (zarr-python's synchronous
API) and 4 dask worker processes, each writing distinct inner chunks of shared shards,
on local files and on S3 (SeaweedFS); zarr-python still reports the array's shards.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask.array as da
import numpy as np
import zarr
import zarr.api.asynchronous as za
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer

from asyncshard.formats.zarr3 import decode_shard, encode_shard
from asyncshard.zarr_python import ZarrStore
from asyncshard.zarr_python.guard import array_layout

SIDE, CHUNK = 64, 8  # one 64x64 shard of 64 inner chunks of 8x8
N = (SIDE // CHUNK) ** 2


def _region(i: int) -> tuple[slice, slice]:
    row, col = divmod(i, SIDE // CHUNK)
    return slice(row * CHUNK, (row + 1) * CHUNK), slice(col * CHUNK, (col + 1) * CHUNK)


def _create(store: ZarrStore) -> zarr.Array[Any]:
    return zarr.create_array(
        store, name="arr", shape=(SIDE, SIDE), chunks=(CHUNK, CHUNK), shards=(SIDE, SIDE),
        dtype="uint8", fill_value=0,
    )  # fmt: skip


def _lost(store: ZarrStore) -> list[int]:
    """The chunks not holding the value their writer wrote (``i + 1`` for chunk ``i``)."""
    back = zarr.open_array(store, path="arr", mode="r")
    assert back.shards == (SIDE, SIDE) and back.chunks == (CHUNK, CHUNK)
    data = back[...]
    return [i for i in range(N) if not (data[_region(i)] == i + 1).all()]


async def _write_async(store: ZarrStore, chunks: range) -> None:
    """``chunks`` written by as many asyncio tasks, through zarr-python's async API."""
    arr = await za.open_array(store=store, path="arr")

    async def write(i: int) -> None:
        await arr.setitem(_region(i), np.full((CHUNK, CHUNK), i + 1, "uint8"))

    await asyncio.gather(*(write(i) for i in chunks))


def test_asyncio_tasks_lose_nothing(zarr_store: ZarrStore) -> None:
    _create(zarr_store)
    asyncio.run(_write_async(zarr_store, range(N)))
    assert _lost(zarr_store) == []


def test_threads_lose_nothing(zarr_store: ZarrStore) -> None:
    """Threads through zarr-python's synchronous API (its own event loop thread)."""
    arr = _create(zarr_store)

    def write(i: int) -> None:
        arr[_region(i)] = np.full((CHUNK, CHUNK), i + 1, "uint8")

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(write, range(N)))
    assert _lost(zarr_store) == []


def test_threads_with_event_loops_of_their_own_lose_nothing(zarr_store: ZarrStore) -> None:
    """4 threads, each running 16 tasks on its own event loop, share one ZarrStore."""
    _create(zarr_store)
    parts = [range(i, N, 4) for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda part: asyncio.run(_write_async(zarr_store, part)), parts))
    assert _lost(zarr_store) == []


def test_dask_worker_processes_lose_nothing(
    dask_client: Any, url_place: tuple[str, dict[str, Any]]
) -> None:
    shape, shard, chunk, dask_chunks = (64, 96), (32, 32), (4, 4), (12, 20)
    url, options = url_place
    store = ZarrStore(url, **options)  # default arguments; pickles as its URL
    target = zarr.create_array(
        store, name="arr", shape=shape, chunks=chunk, shards=shard, dtype="int32", fill_value=-1
    )
    # dask chunks aligned to the inner chunks, not to the shards: several tasks in
    # several processes write every shard at once
    x = da.arange(np.prod(shape), dtype="int32").reshape(shape).rechunk(dask_chunks)
    da.store(x, target, lock=False)  # on the cluster (the client is the default scheduler)
    written = zarr.open_array(ZarrStore(url, **options), path="arr", mode="r")
    assert written.shards == shard
    lost = int((written[...] != np.arange(np.prod(shape)).reshape(shape)).sum())
    assert lost == 0
    assert len(dask_client.nthreads()) == 4


# -- the conflicts, one at a time --------------------------------------------------------

KEY = "arr/c/0/0"


async def _zarr_read(store: ZarrStore) -> bytes:
    """The shard read whole, as zarr-python reads it before a partial write."""
    buf = await store.get(KEY, default_buffer_prototype())
    assert buf is not None
    return buf.to_bytes()


async def _chunks(store: ZarrStore) -> dict[tuple[int, ...], bytes]:
    layout = await array_layout(store.inner, KEY)
    assert layout is not None
    data = await store.inner.get(KEY)
    held = {} if data is None else decode_shard(data, layout.index)
    return {pos: bytes(chunk) for pos, chunk in held.items()}


async def test_a_rewrite_keeps_the_chunks_written_since_its_read(zarr_store: ZarrStore) -> None:
    arr = _create(zarr_store)
    arr[_region(0)] = 1
    layout = await array_layout(zarr_store.inner, KEY)
    assert layout is not None
    read = await _zarr_read(zarr_store)
    await asyncio.create_task(_write_async(zarr_store, range(1, 2)))  # another writer, meanwhile
    chunks = decode_shard(read, layout.index)
    chunks[(0, 2)] = memoryview(b"x" * 64)  # this writer's change
    await zarr_store.set(KEY, Buffer.from_bytes(encode_shard(chunks, layout.index)))
    after = await _chunks(zarr_store)
    assert sorted(after) == [(0, 0), (0, 1), (0, 2)]
    assert after[(0, 2)] == b"x" * 64
    assert zarr.open_array(zarr_store, path="arr")[_region(1)].tolist() == [[2] * 8] * 8


async def test_emptying_a_shard_keeps_the_chunks_written_since_its_read(
    zarr_store: ZarrStore,
) -> None:
    arr = _create(zarr_store)
    arr[_region(0)] = 1
    await _zarr_read(zarr_store)
    await asyncio.create_task(_write_async(zarr_store, range(1, 2)))
    await zarr_store.delete(KEY)  # zarr-python emptied the shard it read (chunk 0 only)
    assert sorted(await _chunks(zarr_store)) == [(0, 1)]


async def test_emptying_an_unchanged_shard_leaves_no_chunk(zarr_store: ZarrStore) -> None:
    arr = _create(zarr_store)
    arr[_region(0)] = 1
    await _zarr_read(zarr_store)
    await zarr_store.delete(KEY)
    assert await _chunks(zarr_store) == {}
    assert not zarr.open_array(zarr_store, path="arr")[...].any()


async def test_a_whole_shard_written_by_a_task_that_did_not_read_it_is_a_plain_write(
    zarr_store: ZarrStore,
) -> None:
    """A read remembered by one task is not taken for the write of a task it starts
    (zarr-python writes a whole shard without reading it): that write replaces the
    shard, also the chunks written since the first task's read."""
    arr = _create(zarr_store)
    arr[_region(0)] = 1
    layout = await array_layout(zarr_store.inner, KEY)
    assert layout is not None
    await _zarr_read(zarr_store)
    await asyncio.create_task(_write_async(zarr_store, range(1, 2)))
    whole = Buffer.from_bytes(encode_shard({(0, 2): b"y" * 64}, layout.index))
    await asyncio.create_task(zarr_store.set(KEY, whole))
    assert await _chunks(zarr_store) == {(0, 2): b"y" * 64}
