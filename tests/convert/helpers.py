"""Helpers of the conversion tests: sample arrays, object snapshots, a store that crashes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np

from asyncshard.ranges import ByteRange
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store


class Crash(Exception):
    """The injected failure: the process "dies" here."""


def make_array(
    path: Path,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    dtype: str = "uint16",
    compressors: Any = "auto",
    separator: str = "/",
    encoding: str = "default",
    sparse: bool = True,
    seed: int = 0,
) -> np.ndarray[Any, Any]:
    """A flat Zarr v3 array written by zarr-python; returns its values.

    With ``sparse`` a block of chunks stays at the fill value (never stored), so that
    conversions meet missing chunks.
    """
    import zarr

    rng = np.random.default_rng(seed)
    data = rng.integers(1, 1000, size=shape).astype(dtype)
    if sparse and data.ndim and data.size:
        data[tuple(slice(0, min(2 * c, s)) for c, s in zip(chunks, shape, strict=True))] = 0
    arr = zarr.create_array(
        str(path),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=0,
        compressors=compressors,
        chunk_key_encoding={"name": encoding, "separator": separator},
    )
    arr[...] = data
    return data


def read_zarr(path: Path) -> np.ndarray[Any, Any]:
    """The array at ``path`` as zarr-python reads it."""
    import zarr

    return np.asarray(zarr.open_array(str(path), mode="r")[...])


def read_tensorstore(path: Path) -> np.ndarray[Any, Any]:
    """The array at ``path`` as tensorstore reads it."""
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return np.asarray(ts.open(spec, read=True).result().read().result())


def assert_readable(path: Path, expected: np.ndarray[Any, Any]) -> None:
    """Both zarr-python and tensorstore read ``expected`` at ``path``."""
    np.testing.assert_array_equal(read_zarr(path), expected)
    np.testing.assert_array_equal(read_tensorstore(path), expected)


def snapshot(root: Path, *, skip: tuple[str, ...] = ("zarr.json",)) -> dict[str, bytes]:
    """``{relative key: bytes}`` of every file below ``root`` (minus names in ``skip``)."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name in skip:
                continue
            full = Path(folder) / name
            out[full.relative_to(root).as_posix()] = full.read_bytes()
    return out


async def store_snapshot(store: Store, prefix: str = "") -> dict[str, bytes]:
    """``{key: bytes}`` of every object of a store below ``prefix``."""
    keys = [k async for k in store.list_prefix(prefix)]
    values = await store.get_partial_values([(k, None) for k in keys])
    return {k[len(prefix) :]: bytes(v) for k, v in zip(keys, values, strict=True) if v is not None}


class CrashingStore(Store):
    """Wraps a store, records its reads (``reads``: key and byte range) and raises
    :class:`Crash` at the n-th matching put or delete."""

    def __init__(
        self,
        inner: Store,
        *,
        puts: int | None = None,
        deletes: int | None = None,
        match: Callable[[str], bool] = lambda key: True,
    ) -> None:
        super().__init__(max_concurrency=inner.max_concurrency)
        self.inner = inner
        self.puts_left = puts
        self.deletes_left = deletes
        self.match = match
        self.reads: list[tuple[str, ByteRange | None]] = []

    @property
    def supports_conditional_writes(self) -> bool:
        return self.inner.supports_conditional_writes

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        self.reads.append((key, byte_range))
        return await self.inner._get(key, byte_range, if_match)

    async def _head(self, key: str) -> ObjectMeta | None:
        return await self.inner._head(key)

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        if self.puts_left is not None and self.match(key):
            if self.puts_left == 0:
                raise Crash(f"crash before writing {key}")
            self.puts_left -= 1
        return await self.inner._set(key, data, if_match, if_absent)

    async def _erase(self, key: str) -> None:
        if self.deletes_left is not None and self.match(key):
            if self.deletes_left == 0:
                raise Crash(f"crash before deleting {key}")
            self.deletes_left -= 1
        await self.inner._erase(key)

    def _list(self, prefix: str) -> AsyncIterator[str]:
        return self.inner._list(prefix)

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return await self.inner._list_dir(prefix)
