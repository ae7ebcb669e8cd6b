"""Any asyncshard Store as an obspec client (:func:`to_obspec`); see :mod:`asyncshard.obspec`."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import obspec
from obspec import exceptions as obspec_errors

from asyncshard.blocking import run_blocking
from asyncshard.errors import (
    ConflictError,
)
from asyncshard.ranges import ByteRange, Offset, Range, Suffix, resolve
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store

__all__ = ["StoreAsObspec", "to_obspec"]

#: Objects per chunk of ``list_async`` (obstore's page size).
LIST_CHUNK = 1000
_EPOCH = datetime.fromtimestamp(0, UTC)
#: Size of the pieces a get result yields when iterated.
_CHUNK_BYTES = 8 << 20


def _meta(meta: ObjectMeta) -> obspec.ObjectMeta:
    return {
        "path": meta.key,
        "last_modified": meta.last_modified or _EPOCH,
        "size": meta.size,
        "e_tag": meta.version,
        "version": None,
    }


def _byte_range(spec: Any) -> ByteRange:
    """obspec's ``range`` option as an asyncshard range."""
    if isinstance(spec, dict):
        if "offset" in spec:
            return Offset(int(spec["offset"]))
        if "suffix" in spec:
            return Suffix(int(spec["suffix"]))
        raise obspec_errors.InvalidPathError(f"unknown range {spec!r}")
    start, end = spec
    return Range(int(start), int(end))


class _Result:
    """obspec's ``GetResultAsync`` over bytes already read."""

    def __init__(self, data: BytesLike, meta: obspec.ObjectMeta, span: tuple[int, int]) -> None:
        self._data = data
        self._meta = meta
        self._span = span

    @property
    def attributes(self) -> obspec.Attributes:
        return {}

    @property
    def meta(self) -> obspec.ObjectMeta:
        return self._meta

    @property
    def range(self) -> tuple[int, int]:
        return self._span

    def buffer(self) -> BytesLike:
        return self._data

    async def buffer_async(self) -> BytesLike:
        return self._data

    def __iter__(self) -> Iterator[BytesLike]:
        view = memoryview(self._data)
        for start in range(0, len(view), _CHUNK_BYTES):
            yield view[start : start + _CHUNK_BYTES]

    def __aiter__(self) -> AsyncIterator[BytesLike]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[BytesLike]:
        for chunk in self:
            yield chunk


def _read_file(file: Any) -> bytes:
    """The bytes of anything obspec's ``put`` accepts."""
    if isinstance(file, Path):
        return file.read_bytes()
    if isinstance(file, io.IOBase) or hasattr(file, "read"):
        return bytes(file.read())
    try:
        return bytes(memoryview(file))
    except TypeError:
        return b"".join(bytes(memoryview(part)) for part in file)


class StoreAsObspec:
    """An asyncshard :class:`~asyncshard.store.Store` as an obspec async client."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"to_obspec({self.store!r})"

    async def _read(
        self, path: str, byte_range: ByteRange | None, if_match: str | None = None
    ) -> GetResult:
        try:
            got = await self.store.get_object(path, byte_range, if_match=if_match)
        except ConflictError as exc:
            raise obspec_errors.PreconditionError(str(exc)) from exc
        if got is None:
            raise obspec_errors.NotFoundError(path)
        return got

    async def get_async(self, path: str, *, options: obspec.GetOptions | None = None) -> _Result:
        options = options or {}
        if options.get("version") is not None:
            raise obspec_errors.NotSupportedError("reading an older version is not supported")
        if options.get("head"):
            meta = await self.head_async(path)
            return _Result(b"", meta, (0, 0))
        byte_range = _byte_range(options["range"]) if "range" in options else None
        got = await self._read(path, byte_range, options.get("if_match"))
        meta = _meta(got.meta)
        self._check_conditions(path, meta, options)
        return _Result(got.data, meta, resolve(byte_range, meta["size"]))

    @staticmethod
    def _check_conditions(path: str, meta: obspec.ObjectMeta, options: obspec.GetOptions) -> None:
        none_match = options.get("if_none_match")
        if none_match is not None and none_match in ("*", meta["e_tag"]):
            raise obspec_errors.NotModifiedError(path)
        modified = meta["last_modified"]
        since = options.get("if_modified_since")
        if since is not None and modified <= since:
            raise obspec_errors.NotModifiedError(path)
        unmodified = options.get("if_unmodified_since")
        if unmodified is not None and modified > unmodified:
            raise obspec_errors.PreconditionError(path)

    async def get_range_async(
        self, path: str, *, start: int, end: int | None = None, length: int | None = None
    ) -> BytesLike:
        stop = _end(start, end, length)
        return (await self._read(path, Range(start, stop))).data

    async def get_ranges_async(
        self,
        path: str,
        *,
        starts: Sequence[int],
        ends: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> Sequence[BytesLike]:
        if ends is None:
            if lengths is None:
                raise ValueError("pass ends or lengths")
            ends = [s + n for s, n in zip(starts, lengths, strict=True)]
        ranges = [(path, Range(s, e)) for s, e in zip(starts, ends, strict=True)]
        datas = await self.store.get_partial_values(ranges)
        if any(data is None for data in datas):
            raise obspec_errors.NotFoundError(path)
        return cast(list[BytesLike], datas)

    async def head_async(self, path: str) -> obspec.ObjectMeta:
        meta = await self.store.head(path)
        if meta is None:
            raise obspec_errors.NotFoundError(path)
        return _meta(meta)

    async def put_async(
        self,
        path: str,
        file: Any,
        *,
        attributes: obspec.Attributes | None = None,
        tags: dict[str, str] | None = None,
        mode: obspec.PutMode | None = None,
        use_multipart: bool | None = None,
        chunk_size: int = 5 * 1024 * 1024,
        max_concurrency: int = 12,
    ) -> obspec.PutResult:
        if attributes or tags:
            raise obspec_errors.NotSupportedError("object attributes and tags are not stored")
        data = _read_file(file)
        if_match, if_absent = None, False
        if mode == "create":
            if_absent = True
        elif isinstance(mode, dict):
            if_match = mode.get("e_tag") or mode.get("version")
            if if_match is None:
                raise ValueError("UpdateVersion needs an e_tag or a version")
        elif mode not in (None, "overwrite"):
            raise ValueError(f"unknown put mode {mode!r}")
        try:
            version = await self.store.set(path, data, if_match=if_match, if_absent=if_absent)
        except ConflictError as exc:
            error = (
                obspec_errors.AlreadyExistsError if if_absent else obspec_errors.PreconditionError
            )
            raise error(str(exc)) from exc
        return {"e_tag": version, "version": None}

    async def delete_async(self, paths: str | Sequence[str]) -> None:
        await self.store.erase_values([paths] if isinstance(paths, str) else list(paths))

    def list_async(
        self, prefix: str | None = None, *, offset: str | None = None
    ) -> AsyncIterator[Sequence[obspec.ObjectMeta]]:
        return self._list(_folder(prefix), offset)

    async def _list(
        self, folder: str, offset: str | None
    ) -> AsyncIterator[Sequence[obspec.ObjectMeta]]:
        chunk: list[str] = []
        async for key in self.store.list_prefix(folder):
            if offset is not None and key <= offset:
                continue
            chunk.append(key)
            if len(chunk) == LIST_CHUNK:
                yield await self._metas(chunk)
                chunk = []
        if chunk:
            yield await self._metas(chunk)

    async def _metas(self, keys: Sequence[str]) -> list[obspec.ObjectMeta]:
        metas = await asyncio.gather(*(self.store.head(key) for key in keys))
        return [_meta(meta) for meta in metas if meta is not None]

    async def list_with_delimiter_async(
        self, prefix: str | None = None
    ) -> obspec.ListResult[Sequence[obspec.ObjectMeta]]:
        keys, prefixes = await self.store.list_dir(_folder(prefix))
        return {
            "common_prefixes": [p.rstrip("/") for p in prefixes],
            "objects": await self._metas(keys),
        }

    async def copy_async(self, from_: str, to: str, *, overwrite: bool = True) -> None:
        if overwrite:
            if await self.store.copy(from_, to) is None:
                raise obspec_errors.NotFoundError(from_)
            return
        data = (await self._read(from_, None)).data
        try:
            await self.store.set(to, data, if_absent=True)
        except ConflictError as exc:
            raise obspec_errors.AlreadyExistsError(to) from exc

    async def rename_async(self, from_: str, to: str, *, overwrite: bool = True) -> None:
        await self.copy_async(from_, to, overwrite=overwrite)
        await self.store.erase_values([from_])

    # -- obspec's synchronous protocols: the same, from synchronous code ----------------

    def get(self, path: str, *, options: obspec.GetOptions | None = None) -> _Result:
        return run_blocking(self.get_async(path, options=options))

    def get_range(
        self, path: str, *, start: int, end: int | None = None, length: int | None = None
    ) -> BytesLike:
        return run_blocking(self.get_range_async(path, start=start, end=end, length=length))

    def get_ranges(
        self,
        path: str,
        *,
        starts: Sequence[int],
        ends: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> Sequence[BytesLike]:
        return run_blocking(self.get_ranges_async(path, starts=starts, ends=ends, lengths=lengths))

    def head(self, path: str) -> obspec.ObjectMeta:
        return run_blocking(self.head_async(path))

    def put(
        self,
        path: str,
        file: Any,
        *,
        attributes: obspec.Attributes | None = None,
        tags: dict[str, str] | None = None,
        mode: obspec.PutMode | None = None,
        use_multipart: bool | None = None,
        chunk_size: int = 5 * 1024 * 1024,
        max_concurrency: int = 12,
    ) -> obspec.PutResult:
        return run_blocking(self.put_async(path, file, attributes=attributes, tags=tags, mode=mode))

    def delete(self, paths: str | Sequence[str]) -> None:
        run_blocking(self.delete_async(paths))

    def list(
        self, prefix: str | None = None, *, offset: str | None = None
    ) -> Iterator[Sequence[obspec.ObjectMeta]]:
        async def chunks() -> list[Sequence[obspec.ObjectMeta]]:
            return [chunk async for chunk in self.list_async(prefix, offset=offset)]

        return iter(run_blocking(chunks()))

    def list_with_delimiter(
        self, prefix: str | None = None
    ) -> obspec.ListResult[Sequence[obspec.ObjectMeta]]:
        return run_blocking(self.list_with_delimiter_async(prefix))

    def copy(self, from_: str, to: str, *, overwrite: bool = True) -> None:
        run_blocking(self.copy_async(from_, to, overwrite=overwrite))

    def rename(self, from_: str, to: str, *, overwrite: bool = True) -> None:
        run_blocking(self.rename_async(from_, to, overwrite=overwrite))


def _end(start: int, end: int | None, length: int | None) -> int:
    if (end is None) == (length is None):
        raise ValueError("pass exactly one of end and length")
    return end if end is not None else start + cast(int, length)


def _folder(prefix: str | None) -> str:
    """obspec prefixes name folders (``"a"`` lists ``a/...``, not ``ab``)."""
    return "" if not prefix else prefix.rstrip("/") + "/"


def to_obspec(store: Store) -> StoreAsObspec:
    """An obspec async client over ``store``."""
    return StoreAsObspec(store)
