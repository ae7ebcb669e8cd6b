"""Streamed writes of a CloudStore: one multipart upload fed part by part.

obstore's ``put`` takes an async iterable: it cuts what it is given into parts of
``STREAM_PART_SIZE`` bytes and uploads up to ``STREAM_PARTS_IN_FLIGHT`` of them at once,
asking for more as parts finish. A multipart upload is invisible until it is completed,
and obstore aborts it when the upload fails or is cancelled; one left behind by a killed
process stays invisible (a bucket lifecycle rule removes it: docs/cloud.md).

The upload takes its share of the endpoint's :class:`~asyncshard.window.Window`: one
place, reserving the bytes of the parts it has in flight, held while the upload is
created (a request, measured as one), while parts are handed over and sent and while
the upload completes (measured as one request), and given back while the upload waits
for its source (whose reads may need a place in the same window: holding one then
could leave every place to uploads waiting for reads that wait for a place). The start
and each part thus wait for their admission, paced like every request when the store
throttles.

A throttling answer to any of its requests fails the upload (obstore aborts it; the
object stays as it was). When its parts can be read again from the start
(:class:`~asyncshard.tree_verbs.Parts` of a callable source, as ``copy_tree`` gives),
the whole upload is sent again, after the window has been cut and as its pacing lets it,
one part in flight at a time, until ``throttle_timeout`` seconds have passed since the
first refusal; then :class:`~asyncshard.errors.ThrottledError`. A transient failure is
retried the same way up to ``max_retries`` times. Parts that can be read once fail the
write at the first refusal, with the store's error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Protocol

import obstore

from asyncshard.backends.cloud.calls import backoff
from asyncshard.backends.cloud.errors import GAVE_UP, OBSTORE_ERRORS, Failure, classify
from asyncshard.backends.cloud.inflight import InFlight
from asyncshard.backends.cloud.versions import encode_version
from asyncshard.errors import AsyncShardError
from asyncshard.store import BytesLike
from asyncshard.tree_verbs import Parts
from asyncshard.window import Slot, Window

#: Bytes per part of a streamed upload (S3's smallest part is 5 MiB).
STREAM_PART_SIZE = 8 * 1024 * 1024
#: Parts of one streamed upload in flight at once (one once it has been throttled).
STREAM_PARTS_IN_FLIGHT = 4


class StreamTarget(Protocol):
    """What a streamed upload needs of its store (``CloudStore`` has it)."""

    retries: int
    throttle_timeout: float
    window: Window | None
    _inflight: InFlight

    def _check_writable(self) -> None: ...

    def _count_request(self, kind: str, n: int = 1) -> None: ...

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError: ...


def stream_buffer(size: int, part_size: int) -> int:
    """Bytes a streamed upload of ``size`` bytes fed ``part_size`` parts holds at most:
    the parts in flight, the one being filled and the one being handed over."""
    return min(size, (STREAM_PARTS_IN_FLIGHT + 1) * STREAM_PART_SIZE + part_size)


class _Feed:
    """One attempt's parts, handed to obstore under a place in the window."""

    def __init__(self, window: Window | None, in_flight: int) -> None:
        self.window = window
        self.in_flight = in_flight  # parts obstore sends at once
        self.sent = 0
        self._held: Slot | None = None
        self._over = False

    async def start(self) -> None:
        """Take a place for the upload's start (obstore creates the upload first)."""
        await self._take()

    async def parts(self, parts: AsyncIterable[BytesLike]) -> AsyncIterator[memoryview]:
        self.give_back(completed=True)  # first asked for a part: the upload was created
        source = aiter(parts)
        while True:
            self.give_back()  # waiting for the source: no place held
            part = await anext(source, None)
            if part is None:
                break
            view = memoryview(part).cast("B")
            self.sent += len(view)
            await self._take()
            yield view
        await self._take()  # for the last parts and the completion

    async def _take(self) -> None:
        if self.window is not None and self._held is None:
            reserve = min(self.sent, self.in_flight * STREAM_PART_SIZE)
            self._held = await self.window.acquire(max(reserve, 1))
            if self._over:  # the attempt ended while this part waited for its place
                self.give_back()

    def give_back(self, *, over: bool = False, completed: bool = False) -> None:
        """Give the place back; ``over``: the attempt has ended, a place granted later
        is given back at once; ``completed``: the upload completed, its last parts and
        completion measured as one request (other holds are no round trip)."""
        self._over = self._over or over
        held, self._held = self._held, None
        if held is not None and self.window is not None:
            self.window.release(held, completed=completed)


async def put_stream(
    store: StreamTarget, os_store: Any, key: str, parts: AsyncIterable[BytesLike]
) -> str | None:
    """Upload ``parts`` as the object ``key`` (one multipart upload, sent again from
    the start on throttling when ``parts`` can be read again); its version."""
    store._check_writable()
    again = isinstance(parts, Parts) and parts.reopens
    window = store.window
    throttled_since: float | None = None
    transient = 0
    while True:
        feed = _Feed(window, STREAM_PARTS_IN_FLIGHT if throttled_since is None else 1)
        try:
            await feed.start()
            result = await store._inflight.run(
                obstore.put_async(
                    os_store,
                    key,
                    feed.parts(parts),
                    mode="overwrite",
                    use_multipart=True,
                    chunk_size=STREAM_PART_SIZE,
                    max_concurrency=feed.in_flight,
                )
            )
            feed.give_back(over=True, completed=True)
            break
        except OBSTORE_ERRORS as exc:
            failure = classify(exc, key)
            if failure is Failure.THROTTLED and window is not None:
                now = time.monotonic()
                throttled_since = throttled_since or now
                if again and now - throttled_since < store.throttle_timeout:
                    feed.give_back()
                    await window.retry_after_throttle()  # cut, then wait for the pacing
                    continue
                window.throttled()  # the endpoint's window hears of it all the same
                if again:  # for to_asyncshard, which makes it a ThrottledError
                    setattr(exc, GAVE_UP, (store.throttle_timeout, window.rate()))
            elif failure is Failure.CONNECTION and again and transient < store.retries:
                feed.give_back()
                await asyncio.sleep(backoff(transient))
                transient += 1
                continue
            raise store._error(exc, failure, key, "write") from exc
        finally:
            feed.give_back(over=True)
    # the verb counted one put: the upload's start, its parts and its completion (an
    # upload sent again is not counted again, as no retry is)
    store._count_request("put", -(-feed.sent // STREAM_PART_SIZE) + 1)
    return encode_version(result.get("e_tag"), result.get("version"))
