"""Reading an object part by part, pinned to one version, and telling whether two
objects are equal without trusting anything weaker than their bytes.

The rule (docs/ARCHITECTURE.md, "Whole-tree copies"): two objects are equal when their
sizes are equal and

1. both stores give a content hash (an S3 or GCS ETag of the MD5 form: 32 hex digits,
   ``-N`` for a multipart upload) and the two are equal; or
2. one store gives one and the other object's bytes, streamed, hash to it (the MD5, or
   for ``-N`` the MD5 of the MD5s of parts of ``STREAM_PART_SIZE``, the parts
   asyncshard uploads in); or
3. neither does and both objects' bytes, streamed side by side, are equal.

Unequal hashes never prove a difference (another part size, an encrypted object), so a
copy only skips on proof of equality and may copy an equal object again. ``size_only``
trusts equal sizes alone (fast, unsafe for objects rewritten in place at equal size).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncGenerator
from typing import Any

from asyncshard.backends.cloud import CloudStore
from asyncshard.backends.cloud.streams import STREAM_PART_SIZE
from asyncshard.backends.cloud.versions import decode_version
from asyncshard.errors import AsyncShardError
from asyncshard.ranges import Range
from asyncshard.store import Data, ObjectMeta, Store

__all__ = ["VanishedError", "content_tag", "equal_objects", "read_parts"]

#: Backends whose ETags are content hashes in the MD5 form (Azure's are not; HTTP
#: servers make their own).
_HASHING_KINDS = frozenset({"s3", "gs"})
_MD5_TAG = re.compile(r"[0-9a-f]{32}(-[1-9][0-9]*)?")
#: Parts hashed in a worker thread from this size on (hashing holds no GIL then).
_THREAD_HASH = 1 << 20


class VanishedError(AsyncShardError):
    """A listed object was gone when it was read (deleted meanwhile)."""


def content_tag(store: Store, meta: ObjectMeta) -> str | None:
    """The content hash the store gives for ``meta`` (a lower-case MD5 ETag, ``-N``
    for multipart uploads), or ``None``."""
    if not isinstance(store, CloudStore) or store.kind not in _HASHING_KINDS:
        return None
    if meta.version is None:
        return None
    e_tag = (decode_version(meta.version)[0] or "").strip('"').lower()
    return e_tag if _MD5_TAG.fullmatch(e_tag) else None


async def read_parts(
    store: Store, key: str, part_size: int, version: str | None = None
) -> AsyncGenerator[Data, None]:
    """The object ``key`` in parts of ``part_size`` bytes, every part read at the
    version of the first (``version``, if given): a changing object raises
    :class:`~asyncshard.errors.ConflictError` instead of mixing bytes of two versions.
    :class:`VanishedError` if it is missing."""
    first = await store.get_object(key, Range(0, part_size), if_match=version)
    if first is None:
        raise VanishedError(f"{key}: gone from the source (deleted meanwhile?)")
    yield first.data
    pinned, size = first.meta.version, first.meta.size
    for start in range(part_size, size, part_size):
        part = await store.get_object(
            key, Range(start, min(start + part_size, size)), if_match=pinned
        )
        if part is None:
            raise VanishedError(f"{key}: gone from the source while being read")
        yield part.data


async def _hash_update(digest: Any, data: Data) -> None:
    if len(data) >= _THREAD_HASH:
        await asyncio.to_thread(digest.update, data)
    else:
        digest.update(data)


async def _hash_as(tag: str, store: Store, meta: ObjectMeta) -> str:
    """The object's hash in the form of ``tag``: its MD5, or the multipart form for
    ``STREAM_PART_SIZE`` parts (``""`` when ``tag``'s part count does not fit)."""
    _, dash, count = tag.partition("-")
    whole = hashlib.md5(usedforsecurity=False)
    if not dash:
        async for data in read_parts(store, meta.key, STREAM_PART_SIZE, meta.version):
            await _hash_update(whole, data)
        return whole.hexdigest()
    if int(count) != max(1, -(-meta.size // STREAM_PART_SIZE)):
        return ""  # uploaded in parts of another size: not comparable
    async for data in read_parts(store, meta.key, STREAM_PART_SIZE, meta.version):
        part = hashlib.md5(usedforsecurity=False)
        await _hash_update(part, data)
        whole.update(part.digest())
    return f"{whole.hexdigest()}-{count}"


async def _same_bytes(
    src: Store, smeta: ObjectMeta, dst: Store, dmeta: ObjectMeta, part_size: int
) -> bool:
    left = read_parts(src, smeta.key, part_size, smeta.version)
    right = read_parts(dst, dmeta.key, part_size, dmeta.version)
    try:
        async for a in left:
            b = await anext(right, None)
            if b is None or memoryview(a).cast("B") != memoryview(b).cast("B"):
                return False
        return await anext(right, None) is None
    finally:
        await left.aclose()
        await right.aclose()


async def equal_objects(
    src: Store,
    smeta: ObjectMeta,
    dst: Store,
    dmeta: ObjectMeta,
    *,
    part_size: int,
    size_only: bool = False,
) -> bool:
    """Whether ``dmeta``'s object at ``dst`` provably holds the bytes of ``smeta``'s at
    ``src`` (see the module for the rule). An object that changes or vanishes while it
    is compared is not equal."""
    if smeta.size != dmeta.size:
        return False
    if size_only:
        return True
    a, b = content_tag(src, smeta), content_tag(dst, dmeta)
    if a is not None and b is not None and (a == b or "-" not in a + b):
        return a == b  # two MD5s of the contents
    try:
        if b is not None:  # the source's bytes in the form of the destination's hash
            return await _hash_as(b, src, smeta) == b
        if a is not None:
            return await _hash_as(a, dst, dmeta) == a
        return await _same_bytes(src, smeta, dst, dmeta, part_size)
    except (AsyncShardError, OSError):
        return False  # changed, gone or unreadable while compared: copy it
