"""One obstore call, retried by the store: throttling paced by the window, other transient
failures a bounded number of times.

obstore's own retries are off by default (``max_retries=0`` in its ``RetryConfig``):
they answer a throttling store at their own pace, invisibly, and hammer it (each retry
is another refused request), and an error reaches the store only once they are spent.
The store retries instead, so that the endpoint's :class:`~asyncshard.window.Window`
sees every throttling answer (S3 ``SlowDown``/503, 429, GCS ``rateLimitExceeded``,
Azure ``ServerBusy``) as it happens:

* a throttled request gives its place in the window back, the window is cut, and the
  request queues again at its front: it is retried as soon as the cut, paced window lets
  it, however often, until ``throttle_timeout`` seconds have passed since it was first
  refused; then :class:`~asyncshard.errors.ThrottledError` names the rate the window
  had reached. A throttling answer means the request was not carried out, so
  conditional writes are retried too;
* a transient failure (a 5xx other than 503, a refused or reset connection, a timeout)
  of an idempotent call is retried up to ``max_retries`` times with jittered exponential
  backoff, as obstore did. A body that broke off is not retried here: the store
  restarts the read (and counts it).

Neither kind of retry is counted in ``stats.requests`` (obstore's were not either); the
window counts the throttling answers. ``Retry-After`` cannot be honoured here: obstore
(0.11 and 0.12) raises a throttling answer as an error holding one message with its
status and body, without its headers (tests/cloud/test_window.py checks that), so the
window's cut and pacing stand in for it (:meth:`Window.throttled` takes one where a
client sees it).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from asyncshard.backends.cloud.errors import (
    GAVE_UP,
    OBSTORE_ERRORS,
    Failure,
    broke_off,
    classify,
)
from asyncshard.backends.cloud.inflight import InFlight
from asyncshard.window import Window

T = TypeVar("T")

#: Seconds a request may keep being throttled before it fails, by default.
THROTTLE_TIMEOUT = 300.0


class Caller(Protocol):
    """What a retried call needs of its store (``CloudStore`` has it)."""

    retries: int
    throttle_timeout: float
    window: Window | None
    _inflight: InFlight

    def _where(self, key: str | None) -> str: ...


async def call(
    store: Caller,
    make: Callable[[], Awaitable[T]],
    *,
    idempotent: bool = True,
    key: str | None = None,
) -> T:
    """``make()`` awaited (tracked by the store's :class:`InFlight`), retried as the
    module says; ``idempotent=False`` retries throttling only. Errors are obstore's, for
    the caller to sort (:func:`.errors.to_asyncshard`); one that ran out of the
    throttling budget carries :data:`.errors.GAVE_UP`."""
    throttled_since: float | None = None
    transient = 0
    while True:
        try:
            return await store._inflight.run(make())
        except OBSTORE_ERRORS as exc:
            failure = classify(exc, key)
            window = store.window
            if failure is Failure.THROTTLED and window is not None:
                now = time.monotonic()
                throttled_since = throttled_since or now
                if now - throttled_since >= store.throttle_timeout:
                    window.throttled()  # counted like every throttling answer
                    # for to_asyncshard, which makes it a ThrottledError
                    setattr(exc, GAVE_UP, (store.throttle_timeout, window.rate()))
                    raise
                await window.retry_after_throttle()
                continue
            retry = failure is Failure.CONNECTION and idempotent and not broke_off(exc)
            if not retry or transient >= store.retries:
                raise
            await asyncio.sleep(backoff(transient))
            transient += 1


def backoff(attempt: int) -> float:
    """Jittered exponential backoff before a retry: up to 50 ms doubling, 2 s at most."""
    return random.uniform(0, min(2.0, 0.05 * 2**attempt))
