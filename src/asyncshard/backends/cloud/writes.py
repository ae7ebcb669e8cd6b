"""Conditional writes whose answer was lost: find out what happened instead of guessing.

obstore does not retry a conditional PUT (``if_absent``/``if_match``): it is not
idempotent. When the connection breaks, the server answers 5xx after obstore's retries
or the answer is lost, the write may or may not have landed. Failing would make the
caller redo work that may be done (and a create-only write that did land would then
conflict with itself); retrying blindly could overwrite another writer. So the store
looks at the object:

* it holds exactly the bytes written → the write landed: return its version (if
  another writer stored identical bytes meanwhile, the outcome is the same object);
* it is still at the version the write was conditioned on (``if_match``), or still
  absent (``if_absent``) → the write did not land: send it again, at most
  ``store.retries`` times, with jittered backoff;
* anything else → ``ConflictError``: another writer got there first.

A write sent again after an unknown outcome can fail its condition because the first
one landed late; the same inspection then tells success from conflict. Bytes are
compared, not ETags: an S3 ETag is an MD5 only for single-part uploads, and GCS and
other servers make their own. The inspection costs a ``HEAD``, plus a ``GET`` of the
object when its size matches; both are counted in ``stats``, like every retried ``PUT``.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import random
from typing import Protocol

from asyncshard.errors import ConflictError, StoreConnectionError
from asyncshard.ranges import ByteRange
from asyncshard.store import GetResult, ObjectMeta


class WriteTarget(Protocol):
    """What the resolution needs of the store it writes to (``CloudStore`` has it)."""

    retries: int

    def _where(self, key: str | None) -> str: ...

    def _count_request(self, kind: str, n: int = 1) -> None: ...

    async def _put_once(
        self, key: str, view: memoryview, if_match: str | None, if_absent: bool
    ) -> str | None: ...

    async def _head(self, key: str) -> ObjectMeta | None: ...

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None: ...


class _Verdict(enum.Enum):
    NOT_WRITTEN = "not written"
    CONFLICT = "conflict"


async def put_conditional(
    store: WriteTarget, key: str, view: memoryview, if_match: str | None, if_absent: bool
) -> str | None:
    """Write ``view`` under its condition, resolving unknown outcomes (see the module)."""
    unknown: StoreConnectionError | None = None
    for attempt in itertools.count():
        try:
            return await store._put_once(key, view, if_match, if_absent)
        except ConflictError:
            if unknown is None:
                raise
            # an earlier attempt whose answer was lost may have landed: look
        except StoreConnectionError as exc:
            unknown = exc
        verdict = await _inspect(store, key, view, if_match, if_absent)
        if isinstance(verdict, str):
            return verdict
        if verdict is _Verdict.CONFLICT:
            raise ConflictError(
                f"{store._where(key)}: another writer changed the object while the outcome "
                f"of this write was unknown ({unknown})",
                key=key,
            ) from unknown
        if attempt >= store.retries:
            raise unknown
        await asyncio.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        store._count_request("put")
    raise AssertionError("unreachable")


async def _inspect(
    store: WriteTarget, key: str, view: memoryview, if_match: str | None, if_absent: bool
) -> str | _Verdict:
    """The object's version if it holds ``view``, else whether the write did not land."""
    store._count_request("head")
    meta = await store._head(key)
    if meta is None:
        return _Verdict.NOT_WRITTEN if if_absent else _Verdict.CONFLICT
    if if_match is not None and meta.version == if_match:
        return _Verdict.NOT_WRITTEN
    if meta.size != len(view):
        return _Verdict.CONFLICT
    store._count_request("get")
    try:
        current = await store._get(key, None, meta.version)
    except ConflictError:  # changed again since the HEAD: not ours to claim
        return _Verdict.CONFLICT
    if current is None or memoryview(current.data).cast("B") != view:
        return _Verdict.CONFLICT
    return current.meta.version or meta.version or ""
