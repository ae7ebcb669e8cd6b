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
from typing import Any, Protocol

import obstore

from asyncshard.backends.cloud.calls import Caller, call
from asyncshard.backends.cloud.errors import OBSTORE_ERRORS, Failure, classify
from asyncshard.backends.cloud.versions import decode_version, encode_version
from asyncshard.errors import AsyncShardError, ConflictError, StoreConnectionError, ThrottledError
from asyncshard.ranges import ByteRange
from asyncshard.store import GetResult, ObjectMeta


class WriteTarget(Caller, Protocol):
    """What the writes need of the store they write to (``CloudStore`` has it)."""

    _os: Any
    multipart_threshold: int

    def _count_request(self, kind: str, n: int = 1) -> None: ...

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError: ...

    async def _head(self, key: str) -> ObjectMeta | None: ...

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None: ...


async def put_once(
    store: WriteTarget, key: str, view: memoryview, if_match: str | None, if_absent: bool
) -> str | None:
    """One PUT, retried on throttling (and on transient failures when unconditional:
    :mod:`.calls`)."""
    mode: Any = "overwrite"
    if if_absent:
        mode = "create"
    elif if_match is not None:
        e_tag, version = decode_version(if_match)
        mode = {k: v for k, v in (("e_tag", e_tag), ("version", version)) if v is not None}
    multipart = mode == "overwrite" and len(view) > store.multipart_threshold
    try:
        result = await call(
            store,
            lambda: obstore.put_async(store._os, key, view, mode=mode, use_multipart=multipart),
            key=key,
            idempotent=mode == "overwrite",
        )
    except OBSTORE_ERRORS as exc:
        failure = classify(exc, key)
        if failure is Failure.MISSING and if_match is not None:
            # an update of a missing object (some servers answer 404)
            raise ConflictError(f"{store._where(key)}: object does not exist", key=key) from exc
        raise store._error(exc, failure, key, "write") from exc
    return encode_version(result.get("e_tag"), result.get("version"))


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
            return await put_once(store, key, view, if_match, if_absent)
        except ConflictError:
            if unknown is None:
                raise
            # an earlier attempt whose answer was lost may have landed: look
        except ThrottledError:
            raise  # refused every time until the budget ran out: not carried out
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
