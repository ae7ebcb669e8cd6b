"""Streamed writes of a CloudStore: one multipart upload fed part by part.

obstore's ``put`` takes an async iterable: it cuts what it is given into parts of
``STREAM_PART_SIZE`` bytes and uploads up to ``STREAM_PARTS_IN_FLIGHT`` of them at once,
asking for more as parts finish. A multipart upload is invisible until it is completed,
and obstore aborts it when the upload fails or is cancelled; one left behind by a killed
process stays invisible (a bucket lifecycle rule removes it: docs/cloud.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Protocol

import obstore

from asyncshard.backends.cloud.errors import OBSTORE_ERRORS, Failure, classify
from asyncshard.backends.cloud.inflight import InFlight
from asyncshard.backends.cloud.versions import encode_version
from asyncshard.errors import AsyncShardError
from asyncshard.store import BytesLike
from asyncshard.window import Window

#: Bytes per part of a streamed upload (S3's smallest part is 5 MiB).
STREAM_PART_SIZE = 8 * 1024 * 1024
#: Parts of one streamed upload in flight at once.
STREAM_PARTS_IN_FLIGHT = 4


class StreamTarget(Protocol):
    """What a streamed upload needs of its store (``CloudStore`` has it)."""

    def _check_writable(self) -> None: ...

    def _count_request(self, kind: str, n: int = 1) -> None: ...

    _inflight: InFlight
    window: Window | None

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError: ...


def stream_buffer(size: int, part_size: int) -> int:
    """Bytes a streamed upload of ``size`` bytes fed ``part_size`` parts holds at most:
    the parts in flight, the one being filled and the one being handed over."""
    return min(size, (STREAM_PARTS_IN_FLIGHT + 1) * STREAM_PART_SIZE + part_size)


async def put_stream(
    store: StreamTarget, os_store: Any, key: str, parts: AsyncIterable[BytesLike]
) -> str | None:
    """Upload ``parts`` as the object ``key`` (one multipart upload); its version."""
    store._check_writable()
    sent = 0

    async def buffers() -> AsyncIterator[memoryview]:
        nonlocal sent
        async for part in parts:
            view = memoryview(part).cast("B")
            sent += len(view)
            yield view

    try:
        # Not retried (the parts are consumed as they are sent): a failed upload fails
        # this object, which stays as it was; the caller may copy it again.
        result = await store._inflight.run(
            obstore.put_async(
                os_store,
                key,
                buffers(),
                mode="overwrite",
                use_multipart=True,
                chunk_size=STREAM_PART_SIZE,
                max_concurrency=STREAM_PARTS_IN_FLIGHT,
            )
        )
    except OBSTORE_ERRORS as exc:
        failure = classify(exc, key)
        if failure is Failure.THROTTLED and store.window is not None:
            store.window.throttled()  # the endpoint's window hears of it all the same
        raise store._error(exc, failure, key, "write") from exc
    # the verb counted one put: the upload's start, its parts and its completion
    store._count_request("put", -(-sent // STREAM_PART_SIZE) + 1)
    return encode_version(result.get("e_tag"), result.get("version"))
