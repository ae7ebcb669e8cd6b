"""A real obspec consumer, obspec-utils, reading a sharded array through ``to_obspec``.

Its readers give a file interface over an obspec client (``head``, then ``get_ranges``
of blocks); its glob lists through ``list_async``. Over a sharded view the inner chunks
are objects: the reader's block requests become one coalesced read of the shard.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from obspec_utils.glob import glob_async, glob_objects_async
from obspec_utils.readers import BlockStoreReader

from asyncshard.backends import LocalStore
from asyncshard.blocking import run_blocking
from asyncshard.obspec import to_obspec
from asyncshard.sharding.zarr import ZarrShardedStore
from tests.zarr.helpers import array_doc, sharded

DATA = np.arange(16 * 16, dtype="uint8").reshape(16, 16)


async def _view(root: Path) -> tuple[LocalStore, ZarrShardedStore]:
    """A sharded array of DATA (4x4 chunks in 2x2 shards) and a fresh view of it."""
    inner = LocalStore(root)
    view = await sharded(inner, array_doc([16, 16], [8, 8], [4, 4]))
    await view.set_values(
        {
            f"arr/c/{i}/{j}": DATA[4 * i : 4 * i + 4, 4 * j : 4 * j + 4].tobytes()
            for i in range(4)
            for j in range(4)
        }
    )
    return inner, await sharded(inner, array_doc([16, 16], [8, 8], [4, 4]))


def test_block_reader_reads_inner_chunks_as_files(tmp_path: Path) -> None:
    inner, view = run_blocking(_view(tmp_path))
    client = to_obspec(view)
    inner.stats.reset()
    with BlockStoreReader(client, "arr/c/2/3", block_size=4) as reader:
        assert reader.read(4) == DATA[8, 12:16].tobytes()
        reader.seek(8)
        rest = reader.read()
    assert np.array_equal(np.frombuffer(rest, "uint8"), DATA[10:12, 12:16].ravel())
    # cold: the shard index once; the chunk reads are index-conditioned data reads
    assert inner.stats.requests["get"] <= 3 and inner.stats.requests.get("head", 0) == 0


async def test_glob_lists_chunks_through_list_async(tmp_path: Path) -> None:
    _, view = await _view(tmp_path)
    client = to_obspec(view)
    paths = [path async for path in glob_async(client, "arr/c/1/*")]
    assert sorted(paths) == [f"arr/c/1/{j}" for j in range(4)]
    metas = [meta async for meta in glob_objects_async(client, "arr/c/*/2")]
    assert sorted(m["path"] for m in metas) == [f"arr/c/{i}/2" for i in range(4)]
    assert all(m["size"] == 16 for m in metas)
