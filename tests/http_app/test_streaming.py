"""Bodies are streamed through the store in pieces; failures map to the right statuses."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest

from asyncshard.backends import LocalStore
from asyncshard.errors import (
    AsyncShardError,
    CorruptShardError,
    StoreConnectionError,
    StorePermissionError,
)
from asyncshard.ranges import ByteRange, Range
from asyncshard.store import GetResult, NowResult, WouldWait
from tests.http_app.conftest import ServeFactory

PIECE = 64 * 1024
BIG = os.urandom(PIECE * 16 + 123)  # about 1 MiB


class Recording(LocalStore):
    """A LocalStore that records reads and can misbehave on the n-th one."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, ByteRange | None, str | None]] = []
        self.fail_at: int | None = None
        self.error: Exception = StoreConnectionError("backend down")
        self.on_read: dict[int, Path] = {}

    def _record(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> None:
        self.reads.append((key, byte_range, if_match))
        n = len(self.reads)
        if n == self.fail_at:
            raise self.error
        if n in self.on_read:  # replace the object behind the server's back
            self.on_read[n].write_bytes(b"replaced" * 10000)

    async def get_object(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> GetResult | None:
        self._record(key, byte_range, if_match)
        return await super().get_object(key, byte_range, if_match=if_match)

    def get_now(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> NowResult:
        """Recorded like a read when it answers (the server's first read)."""
        result = super().get_now(key, byte_range, if_match=if_match)
        if not isinstance(result, WouldWait):
            self._record(key, byte_range, if_match)
        return result


@pytest.fixture
def recording(tmp_path: Path) -> Recording:
    root = tmp_path / "root"
    root.mkdir()
    (root / "big").write_bytes(BIG)
    return Recording(root)


def assert_pieces(store: Recording, covered: tuple[int, int]) -> None:
    ranges = [r for _, r, _ in store.reads]
    assert all(isinstance(r, Range) and r.end - r.start <= PIECE for r in ranges), ranges
    assert ranges[0].start == covered[0]  # type: ignore[union-attr]
    versions = {v for _, _, v in store.reads[1:]}
    assert len(versions) == 1 and None not in versions, "later pieces read at the same version"


async def test_whole_object_is_streamed_in_pieces(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    async with serve(store=recording, piece_size=PIECE) as s, http.get(f"{s.url}/big") as r:
        assert r.headers["Content-Length"] == str(len(BIG))
        assert await r.read() == BIG
    assert len(recording.reads) == 17
    assert_pieces(recording, (0, len(BIG)))


async def test_large_range_is_streamed_in_pieces(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    async with serve(store=recording, piece_size=PIECE) as s:
        for header, (start, end) in [
            ("bytes=1000-700000", (1000, 700001)),
            ("bytes=500000-", (500000, len(BIG))),
            (f"bytes=-{PIECE * 3}", (len(BIG) - PIECE * 3, len(BIG))),
        ]:
            recording.reads.clear()
            async with http.get(f"{s.url}/big", headers={"Range": header}) as r:
                assert r.status == 206
                assert await r.read() == BIG[start:end]
            assert_pieces(recording, (start, end))


async def test_multipart_parts_are_streamed_in_pieces(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    two = {"Range": "bytes=0-9,200000-600000"}
    async with (
        serve(store=recording, piece_size=PIECE) as s,
        http.get(f"{s.url}/big", headers=two) as r,
    ):
        body = await r.read()
        assert r.status == 206 and int(r.headers["Content-Length"]) == len(body)
    assert BIG[200000:600001] in body
    ranges = [r for _, r, _ in recording.reads]
    assert all(isinstance(r, Range) and r.end - r.start <= PIECE for r in ranges)


async def test_head_reads_no_data(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    async with serve(store=recording, piece_size=PIECE) as s, http.head(f"{s.url}/big") as r:
        assert r.headers["Content-Length"] == str(len(BIG))
    assert recording.reads == []


async def test_object_replaced_mid_stream_aborts_the_response(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    recording.on_read[2] = recording.root / "big"
    async with serve(store=recording, piece_size=PIECE) as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with http.get(f"{s.url}/big") as r:
                assert r.status == 200
                await r.read()
        async with http.get(f"{s.url}/big") as r:  # the server carries on
            assert await r.read() == b"replaced" * 10000


async def test_backend_failure_mid_stream_aborts_the_response(
    serve: ServeFactory, http: aiohttp.ClientSession, recording: Recording
) -> None:
    recording.fail_at = 3
    async with serve(store=recording, piece_size=PIECE) as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with http.get(f"{s.url}/big") as r:
                await r.read()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (StoreConnectionError("timeout"), 502),
        (StorePermissionError("denied"), 502),
        (CorruptShardError("bad index"), 500),
        (AsyncShardError("other"), 500),
    ],
)
async def test_backend_errors_before_the_body(
    serve: ServeFactory,
    http: aiohttp.ClientSession,
    recording: Recording,
    error: Exception,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recording.fail_at = 1
    recording.error = error
    async with serve(store=recording, piece_size=PIECE) as s, http.get(f"{s.url}/big") as r:
        assert r.status == status
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        text = await r.text()
    assert str(error) not in text, "the details go to the server's log only"
    assert f"(request id {r.headers['X-Request-Id']})" in text
    assert f"request {r.headers['X-Request-Id']}: GET /big: {type(error).__name__}" in caplog.text
