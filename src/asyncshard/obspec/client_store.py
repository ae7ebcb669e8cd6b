"""Any obspec client as an asyncshard Store (:func:`from_obspec`); see :mod:`asyncshard.obspec`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import obspec
import obstore.store

from asyncshard.answers import checked_answer, checked_ranged_body
from asyncshard.backends.cloud.errors import Failure, classify
from asyncshard.errors import (
    BucketNotFoundError,
    ConflictError,
    StoreBackendError,
    UnsupportedOperationError,
)
from asyncshard.obspec.as_client import StoreAsObspec
from asyncshard.ranges import ByteRange, Offset, Range, bounded_span, resolve
from asyncshard.store import BytesLike, Data, GetResult, ObjectMeta, Store

__all__ = ["ObspecClientStore", "from_obspec", "is_obspec_client"]


_NEEDED = ("get_async", "head_async")


def is_obspec_client(obj: object) -> bool:
    """Whether ``obj`` speaks obspec's async reads (``get_async`` and ``head_async``)."""
    return not isinstance(obj, Store) and all(callable(getattr(obj, n, None)) for n in _NEEDED)


def _kind(exc: BaseException) -> str:
    """The error kind, by class name (obstore's and obspec's share names)."""
    if isinstance(exc, FileNotFoundError):
        return "NotFoundError"
    return next((k.__name__ for k in type(exc).__mro__ if k.__name__ in _KINDS), type(exc).__name__)


_KINDS = {"NotFoundError", "PreconditionError", "AlreadyExistsError", "NotSupportedError",
          "NotImplementedError"}  # fmt: skip


def _to_range(byte_range: ByteRange) -> Any:
    if isinstance(byte_range, Range):
        return (byte_range.start, byte_range.end)
    if isinstance(byte_range, Offset):
        return {"offset": byte_range.offset}
    return {"suffix": byte_range.length}


#: Clients whose ``get_range_async`` answers can be trusted by default (``ranged_reads``).
_RANGES_CHECKED: tuple[type, ...] = (
    obstore.store.AzureStore,
    obstore.store.GCSStore,
    obstore.store.HTTPStore,
    obstore.store.LocalStore,
    obstore.store.MemoryStore,
    obstore.store.S3Store,
    StoreAsObspec,
)
#: Failures of a ranged read that ``get_async`` answers: a range starting at or past the
#: end (416; obstore's own stores raise untyped errors for it).
_RANGE_REFUSALS = frozenset({Failure.UNSATISFIABLE, Failure.OTHER})


def _no_bucket(key: str) -> BucketNotFoundError:
    """A read answered "no such bucket" (S3's and GCS's error code): not a missing key."""
    return BucketNotFoundError(f"{key}: the client's bucket or container does not exist")


class _RangeRefused(Exception):
    """The client refused a ranged read (the range starts at or past the end)."""


class ObspecClientStore(Store):
    """An obspec client as an asyncshard Store. Versions are the client's ETags.

    Args:
        client: anything with obspec's async methods (``get_async``, ``head_async``, and
            for writes ``put_async``/``delete_async``, for listing ``list_async`` and
            ``list_with_delimiter_async``); obstore stores are such clients.
        conditional_writes: whether the client honours ``mode="create"`` and
            ``UpdateVersion`` puts. A client that refuses one raises
            ``UnsupportedOperationError``; nothing is ever written unconditionally in
            place of a conditional write.
        ranged_reads: whether reads of bytes alone may take the client's
            ``get_range_async`` (one call instead of ``get_async`` and ``buffer_async``),
            trusting it to answer exactly the range asked, clamped at the end, as obspec
            says (only a body longer than asked can be seen, and raises). By default
            only obstore's stores (object_store checks what servers send) and
            :func:`to_obspec`'s; a client without the method never does.
    """

    def __init__(
        self,
        client: Any,
        *,
        conditional_writes: bool = True,
        ranged_reads: bool | None = None,
        **options: int,
    ) -> None:
        if not is_obspec_client(client):
            raise TypeError(f"{client!r} is not an obspec client (no get_async/head_async)")
        super().__init__(**options)
        self.client = client
        self._conditional = conditional_writes
        if ranged_reads is None:
            ranged_reads = isinstance(client, _RANGES_CHECKED)
        self._ranged = ranged_reads and callable(getattr(client, "get_range_async", None))
        self._whole_reads = False  # set when the server answers ranges with whole objects

    def __repr__(self) -> str:
        return f"from_obspec({self.client!r})"

    @property
    def supports_writes(self) -> bool:
        return callable(getattr(self.client, "put_async", None))

    @property
    def supports_listing(self) -> bool:
        return callable(getattr(self.client, "list_async", None))

    @property
    def supports_conditional_writes(self) -> bool:
        return self._conditional and self.supports_writes

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        options: dict[str, Any] = {} if if_match is None else {"if_match": if_match}
        try:
            if byte_range is None:
                return await self._fetch_once(key, None, options)
            if isinstance(byte_range, Range) and byte_range.end <= byte_range.start:
                return await self._empty(key, if_match)
            if self._whole_reads:
                return await self._whole_sliced(key, byte_range, options)
            try:
                return await self._fetch_once(key, byte_range, options)
            except _RangeRefused as refused:
                if classify(refused.__cause__ or refused) is Failure.NOT_PARTIAL:
                    self._no_ranges()
                    self._count_request("get")
                    return await self._whole_sliced(key, byte_range, options)
                # obspec clients refuse ranges that start at or past the end, which
                # asyncshard clamps like Python slicing: find the size, then clamp
                return await self._clamped(key, byte_range, options, if_match)
        except ConflictError:
            raise

    def _no_ranges(self) -> None:
        """The server answers ranges with whole objects: read whole and cut from now on."""
        self._whole_reads, self._ranged = True, False

    async def _get_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """The bytes alone, in one ``get_range_async`` call where ``ranged_reads`` allows.

        ``get_async`` and then ``buffer_async`` are two awaited calls (obstore: two
        hand-offs from its threads to the event loop); a range with both ends given is
        one, a range open to the end reading the whole object. A range that call
        refuses (an empty object, a range past the end) is clamped after a ``HEAD``, as
        ``_get`` clamps; a server that answers ranges with whole objects turns the path
        off for this store (its ranges are then cut from whole reads); other failures
        raise as ``_get``'s do. A suffix or an empty range goes to ``_get`` at once.
        """
        span = bounded_span(byte_range) if self._ranged else None
        if span is None:
            result = await self._get(key, byte_range, None)
            return None if result is None else result.data
        try:
            data = await self.client.get_range_async(key, start=span[0], end=span[1])
        except Exception as exc:
            failure = classify(exc, key)
            if failure is Failure.MISSING:
                return None
            if failure is Failure.NO_BUCKET:
                raise _no_bucket(key) from exc
            if failure is Failure.NOT_PARTIAL:
                self._no_ranges()
                self._count_request("get")  # the read again
                result = await self._get(key, byte_range, None)
            elif failure in _RANGE_REFUSALS:
                result = await self._clamped(key, byte_range or Offset(0), {}, None)
            else:
                raise StoreBackendError(f"{key}: {exc}") from exc
            return None if result is None else result.data
        return checked_ranged_body(key, span, data)  # obstore's Bytes or any buffer, not copied

    async def _fetch_once(
        self, key: str, byte_range: ByteRange | None, options: dict[str, Any]
    ) -> GetResult | None:
        """One ``get_async`` of ``byte_range`` (``None``: the whole object), its answer
        checked (:func:`~asyncshard.answers.checked_answer`)."""
        if byte_range is not None:
            options = {**options, "range": _to_range(byte_range)}
        try:
            result = await self.client.get_async(key, options=options or None)
            data = await result.buffer_async()
        except Exception as exc:
            kind = _kind(exc)
            if classify(exc, key) is Failure.NO_BUCKET:
                raise _no_bucket(key) from exc
            if kind == "NotFoundError":
                return None
            if kind == "PreconditionError":
                version = options.get("if_match")
                raise ConflictError(f"{key}: object is not at version {version}", key=key) from exc
            if "range" in options:
                raise _RangeRefused() from exc
            raise StoreBackendError(f"{key}: {exc}") from exc
        meta = self._meta(key, result.meta)
        return GetResult(checked_answer(key, byte_range, data, result, meta.size), meta)

    async def _whole_sliced(
        self, key: str, byte_range: ByteRange, options: dict[str, Any]
    ) -> GetResult | None:
        """``byte_range`` cut from the whole object (a server that has no ranges)."""
        result = await self._fetch_once(key, None, options)
        if result is None:
            return None
        start, end = resolve(byte_range, result.meta.size)
        return GetResult(memoryview(result.data)[start:end], result.meta)

    async def _clamped(
        self, key: str, byte_range: ByteRange, options: dict[str, Any], if_match: str | None
    ) -> GetResult | None:
        self._count_request("head")
        meta = await self._head(key)
        if meta is None:
            return None
        start, end = resolve(byte_range, meta.size)
        if end <= start:
            return await self._empty(key, if_match, meta)
        self._count_request("get")
        try:
            return await self._fetch_once(key, Range(start, end), options)
        except _RangeRefused as refused:  # refused again, inside the object: an error
            raise StoreBackendError(f"{key}: {refused.__cause__}") from refused.__cause__

    async def _empty(
        self, key: str, if_match: str | None, meta: ObjectMeta | None = None
    ) -> GetResult | None:
        """An empty read: the object's metadata only (its condition still checked)."""
        if meta is None:
            self._count_request("head")
            meta = await self._head(key)
        if meta is None:
            return None
        if if_match is not None and meta.version != if_match:
            raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
        return GetResult(b"", meta)

    @staticmethod
    def _meta(key: str, meta: obspec.ObjectMeta) -> ObjectMeta:
        version = meta.get("e_tag") or meta.get("version")
        return ObjectMeta(key, int(meta["size"]), version, meta.get("last_modified"))

    async def _head(self, key: str) -> ObjectMeta | None:
        try:
            return self._meta(key, await self.client.head_async(key))
        except Exception as exc:
            if _kind(exc) == "NotFoundError":
                return None
            raise StoreBackendError(f"{key}: {exc}") from exc

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        mode: Any = "overwrite"
        if if_absent or if_match is not None:
            if not self.supports_conditional_writes:
                raise UnsupportedOperationError(f"{self!r} has no conditional writes")
            mode = "create" if if_absent else {"e_tag": if_match}
        try:
            result = await self.client.put_async(key, bytes(data), mode=mode)
        except Exception as exc:
            kind = _kind(exc)
            if kind in ("AlreadyExistsError", "PreconditionError"):
                raise ConflictError(f"{key}: write condition failed", key=key) from exc
            if kind in ("NotSupportedError", "NotImplementedError") and mode != "overwrite":
                raise UnsupportedOperationError(
                    f"{self!r} refused a conditional write: {exc}"
                ) from exc
            raise StoreBackendError(f"{key}: {exc}") from exc
        version = result.get("e_tag") or result.get("version")
        return str(version) if version is not None else None

    async def _erase(self, key: str) -> None:
        try:
            await self.client.delete_async(key)
        except Exception as exc:
            if _kind(exc) != "NotFoundError":
                raise StoreBackendError(f"{key}: {exc}") from exc

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        folder, _, _ = prefix.rpartition("/")
        async for chunk in self.client.list_async(folder or None):
            for meta in sorted(chunk, key=lambda m: m["path"]):
                if meta["path"].startswith(prefix):
                    yield meta["path"]

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        result = await self.client.list_with_delimiter_async(prefix.rstrip("/") or None)
        keys = sorted(meta["path"] for meta in result["objects"])
        return keys, sorted(p.rstrip("/") + "/" for p in result["common_prefixes"])


def from_obspec(
    client: Any,
    *,
    conditional_writes: bool = True,
    ranged_reads: bool | None = None,
    **options: int,
) -> Store:
    """An asyncshard Store over an obspec client (see :class:`ObspecClientStore`)."""
    return ObspecClientStore(
        client, conditional_writes=conditional_writes, ranged_reads=ranged_reads, **options
    )
