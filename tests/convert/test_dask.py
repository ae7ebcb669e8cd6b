"""Conversions on a local dask.distributed cluster: workers open the store from its URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore, MemoryStore, open_store
from asyncshard.convert import DaskRunner, reshard, shard_store, unshard_store
from asyncshard.convert.runner import make_runner
from tests.convert.helpers import assert_readable, make_array, snapshot


def test_round_trip_on_dask(dask_client: Any, tmp_path: Path) -> None:
    arr = tmp_path / "vol" / "arr"
    data = make_array(arr, (64, 50), (4, 4))  # 16x13 chunks
    original = snapshot(arr)
    url = f"file://{tmp_path / 'vol'}"

    from distributed import get_task_stream

    with get_task_stream(dask_client) as stream:
        summary = shard_store(url, 2, client=dask_client, max_in_flight=2)
    assert {t["worker"] for t in stream.data} == set(dask_client.nthreads())  # both workers
    assert summary.arrays_changed == ["arr"] and summary.chunks_moved == len(original)
    assert_readable(arr, data)
    reshard(url, (4, 1), client=dask_client)  # keys kept: two passes, both on the cluster
    assert_readable(arr, data)
    unshard_store(url, client=dask_client)
    assert snapshot(arr) == original
    assert_readable(arr, data)


def test_dask_needs_a_url(dask_client: Any) -> None:
    with pytest.raises(TypeError, match="URL"):
        shard_store(MemoryStore(), 2, client=dask_client)
    with pytest.raises(ValueError, match="batch_size"):
        DaskRunner(dask_client, "memory://", batch_size=0)


def test_dask_opens_a_store_from_its_url(tmp_path: Path) -> None:
    """A store object with a URL (``Store.url``) is reopened by the workers from it, with
    the options it was opened with (``Store.open_options``)."""
    runner = make_runner(
        LocalStore(tmp_path, durable=False), runner=None, client=object(), max_in_flight=2
    )
    assert isinstance(runner, DaskRunner) and runner.url == tmp_path.as_uri()
    assert runner.storage_options["durable"] is False
    reopened = open_store(runner.url, runner.storage_options)
    assert isinstance(reopened, LocalStore) and reopened.url == tmp_path.as_uri()
    assert reopened.durable is False
