"""Streamed uploads (objects larger than one part: ``set_stream``, a multipart upload)
through a front that refuses requests above a rate (tests/servers/proxy.py): copy_tree
and ``cp -r`` complete, the uploads taking their places in the endpoint's window and
sent again from their start when refused; a throttle_timeout that runs out fails with
ThrottledError and leaves the destination's previous object as it was. Asserted through
the front's log, the window's and the store's counters, never through timing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncshard import CopyError, copy_tree_async
from asyncshard.backends.cloud import CloudStore
from asyncshard.backends.cloud.streams import STREAM_PART_SIZE, STREAM_PARTS_IN_FLIGHT
from asyncshard.cli import cli
from asyncshard.errors import StoreConnectionError, ThrottledError
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server
from tests.transfer.conftest import write_tree
from tests.transfer.test_cp_servers import contents, s3_flags

#: Objects of two and a half parts: a multipart upload of three parts each.
SIZE = 2 * STREAM_PART_SIZE + STREAM_PART_SIZE // 2


@pytest.fixture
def front(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fresh front (its own port: its own window) in front of the S3 server."""
    proxy = FaultProxy(s3_server.endpoint).start()
    yield proxy
    proxy.stop()


def large_tree(root: Path, n: int) -> dict[str, bytes]:
    return write_tree(root, {f"big/{i}": os.urandom(SIZE + i) for i in range(n)})


@pytest.mark.parametrize("source", ["local", "same endpoint"])
async def test_a_streamed_copy_through_a_throttling_front_completes(
    source: str, s3_server: S3Server, front: FaultProxy, tmp_path: Path
) -> None:
    """Four uploads of three parts at once, through a front that takes 10 requests a
    second (3 saved up): parts are refused, the uploads are sent again and all complete;
    the counters count each object once. From the same endpoint (one window for the
    reads and the uploads they feed), the uploads never hold the places their reads
    wait for."""
    tree = large_tree(tmp_path / "src", 4)
    src: Any = tmp_path / "src"
    if source == "same endpoint":
        prefix = unique_prefix()
        await copy_tree_async(src, s3_store_on(s3_server, prefix))  # not through the front
        src = s3_store_on(s3_server, prefix, endpoint=front.url)
    dst = s3_store_on(s3_server, unique_prefix(), endpoint=front.url)
    assert isinstance(dst, CloudStore) and dst.window is not None
    front.throttle(10, burst=3)  # fewer than the four uploads' first requests at once
    summary = await copy_tree_async(src, dst)
    assert (summary.copied, summary.failed) == (4, 0)
    refused = [s for s in front.log if s.fault == "throttled"]
    assert refused and all(s.status == 503 for s in refused)
    if source == "local":  # the front saw the uploads alone
        # their retries waited for the window (sent as fast as they were refused, 97 %
        # of the requests were refusals; paced, 20-35 %)
        assert len(refused) < 0.75 * len(front.log)
    # refused requests of the uploads themselves (their start, parts or completion)...
    uploads = {f"/{s3_server.bucket}/{dst.prefix}/{key}" for key in tree}
    assert {s.path for s in refused if s.method in ("POST", "PUT")} & uploads
    # ...each upload then went through: three parts and a completion accepted
    for path in uploads:
        sent = [s for s in front.log if s.path == path and s.fault is None]
        assert sum(s.method == "PUT" for s in sent) >= 3
        assert sum(s.method == "POST" for s in sent) >= 2  # its start and completion
    state = dst.window.state()
    # the window heard of each failed upload (one error for the parts refused together)
    assert 0 < state.throttles <= len(refused)
    assert (state.in_flight, state.bytes_in_flight) == (0, 0)  # every place given back
    direct = s3_store_on(s3_server, dst.prefix)
    assert await contents(direct) == tree
    # one put counted per request of the upload that completed, none for the refused
    assert dst.stats.requests["put"] == 4 * (3 + 2)
    assert dst.stats.bytes_written == sum(map(len, tree.values()))


async def test_the_uploads_take_their_places_in_the_window(
    s3_server: S3Server, front: FaultProxy, tmp_path: Path
) -> None:
    """Streamed uploads reserve the bytes of their parts in flight: with a bound of one
    upload's parts in flight, three uploads at once keep the window's high-water mark
    of bytes within it (one whole upload reaches it), and no place is left held."""
    tree = large_tree(tmp_path / "src", 3)
    bound = STREAM_PARTS_IN_FLIGHT * STREAM_PART_SIZE
    dst = s3_store_on(s3_server, unique_prefix(), endpoint=front.url, max_bytes_in_flight=bound)
    assert isinstance(dst, CloudStore) and dst.window is not None
    summary = await copy_tree_async(tmp_path / "src", dst)
    assert summary.copied == 3
    state = dst.window.state()
    assert SIZE <= state.peak_bytes <= bound
    assert (state.in_flight, state.bytes_in_flight) == (0, 0)
    assert await contents(s3_store_on(s3_server, dst.prefix)) == tree


async def test_a_throttle_timeout_that_runs_out_keeps_the_previous_object(
    s3_server: S3Server, front: FaultProxy, tmp_path: Path
) -> None:
    """A front that refuses every upload: after throttle_timeout the object fails with
    ThrottledError, the destination still holds its previous object, nothing partial."""
    large_tree(tmp_path / "src", 1)
    prefix = unique_prefix()
    direct = s3_store_on(s3_server, prefix)
    await direct.set("big/0", b"previous")
    dst = s3_store_on(s3_server, prefix, endpoint=front.url, throttle_timeout=1)
    front.throttle(0.001, burst=2)  # the listing and the HEAD pass, nothing after
    with pytest.raises(CopyError) as caught:
        await copy_tree_async(tmp_path / "src", dst)
    [(key, error)] = caught.value.summary.failures
    assert key == "big/0" and error.startswith(f"{ThrottledError.__name__}: ")
    assert "still throttled after 1 s (throttle_timeout)" in error
    assert front.stats()["refused"] >= 2  # refused, sent again, refused
    assert await direct.get("big/0") == b"previous"
    assert [key async for key in direct.list()] == ["big/0"]
    assert dst.window is not None and dst.window.state().in_flight == 0


def test_cp_r_through_a_front_that_never_lets_an_upload_through_exits_1(
    s3_server: S3Server, front: FaultProxy, tmp_path: Path
) -> None:
    """The same through ``cp -r``: exit status 1, one clear line per failure and no
    traceback, the previous object intact."""
    large_tree(tmp_path / "src", 1)
    prefix = unique_prefix()
    direct = s3_store_on(s3_server, prefix)
    asyncio.run(direct.set("big/0", b"previous"))
    front.throttle(0.001, burst=2)
    flags = [*s3_flags(s3_server), "--endpoint", front.url, "-o", "throttle_timeout=1"]
    url = f"s3://{s3_server.bucket}/{prefix}"
    result = CliRunner().invoke(cli, ["cp", "-r", str(tmp_path / "src"), url, *flags])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "still throttled after 1 s (throttle_timeout)" in result.output
    assert asyncio.run(direct.get("big/0")) == b"previous"


async def test_parts_that_can_be_read_once_are_sent_once(
    s3_server: S3Server, front: FaultProxy
) -> None:
    """``set_stream`` of a plain async iterable cannot send a refused upload again: it
    fails at the first refusal (the window hears of it), the previous object intact."""
    prefix = unique_prefix()
    direct = s3_store_on(s3_server, prefix)
    await direct.set("k", b"previous")
    dst = s3_store_on(s3_server, prefix, endpoint=front.url)
    assert isinstance(dst, CloudStore) and dst.window is not None

    async def parts() -> AsyncIterator[bytes]:
        for i in range(3):
            yield bytes([i]) * STREAM_PART_SIZE

    front.throttle(0.001, burst=0)  # every request refused
    with pytest.raises(StoreConnectionError, match="SlowDown") as caught:
        await dst.set_stream("k", parts())
    assert not isinstance(caught.value, ThrottledError)
    assert front.stats() == {"seen": 1, "refused": 1}  # its start, refused, not sent again
    assert dst.window.state().throttles == 1
    assert await direct.get("k") == b"previous"
