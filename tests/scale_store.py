"""A synthetic store for scale tests: millions of objects that cost no memory.

:class:`SyntheticStore` lists generated keys (a flat or sharded Zarr array's objects)
and answers every one of them with one shared value; what is written as ``.json`` is
kept, anything else is counted and dropped (a sink), and deletes of generated keys are
counted. So what a listing or a conversion holds is all that grows in a test.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from asyncshard.objects import Data, GetResult, ObjectMeta
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import BytesLike, Store, check_condition

_versions = itertools.count(1)


def array_doc(grid: tuple[int, int], chunk: int = 8) -> dict[str, Any]:
    """A flat 2-d uint8 Zarr v3 array of ``grid`` chunks of ``chunk`` x ``chunk`` bytes."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [g * chunk for g in grid],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk, chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }


class SyntheticStore(Store):
    """Generated objects ``prefix + "c/i/j"`` for ``i, j`` in ``grid``, each ``value``.

    Args:
        grid: the objects along each axis (none: only what is written).
        value: the bytes of every generated object.
        docs: JSON documents stored from the start (key -> document).
        prefix: the folder of the generated keys.
    """

    def __init__(
        self,
        grid: tuple[int, int] = (0, 0),
        value: bytes = b"",
        docs: dict[str, Any] | None = None,
        prefix: str = "a/",
    ) -> None:
        super().__init__()
        self.grid, self.value, self.prefix = grid, value, prefix
        self.kept: dict[str, tuple[bytes, ObjectMeta]] = {}
        self.sunk = 0
        self.erased = 0
        self._pattern = re.compile(re.escape(prefix) + r"c/([0-9]+)/([0-9]+)")
        for key, doc in (docs or {}).items():
            self._keep(key, json.dumps(doc).encode())

    def _keep(self, key: str, data: bytes) -> str:
        version = str(next(_versions))
        self.kept[key] = (data, ObjectMeta(key, len(data), version))
        return version

    def generated(self, key: str) -> bool:
        """Whether ``key`` is one of the generated objects."""
        match = self._pattern.fullmatch(key)
        return match is not None and all(
            int(v) < g for v, g in zip(match.groups(), self.grid, strict=True)
        )

    def _names(self) -> Iterator[str]:
        for i in range(self.grid[0]):
            for j in range(self.grid[1]):
                yield f"{self.prefix}c/{i}/{j}"

    def _entry(self, key: str) -> tuple[bytes, ObjectMeta] | None:
        if key in self.kept:
            return self.kept[key]
        if self.generated(key):
            return self.value, ObjectMeta(key, len(self.value), "g")
        return None

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        entry = self._entry(key)
        if entry is None:
            return None
        data, meta = entry
        check_condition(key, meta, if_match, False)
        start, end = resolve(byte_range, len(data))
        return GetResult(memoryview(data)[start:end], meta)

    async def _get_many(self, keys: Sequence[str]) -> list[Data | None]:
        """A batch at once, as a store that reads batches in one call."""
        return [None if (e := self._entry(k)) is None else memoryview(e[0]) for k in keys]

    async def _set_many(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        return [await self._set(k, v, None, False) for k, v in items]

    async def _head(self, key: str) -> ObjectMeta | None:
        entry = self._entry(key)
        return None if entry is None else entry[1]

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        if key.endswith(".json"):
            entry = self.kept.get(key)
            check_condition(key, entry and entry[1], if_match, if_absent)
            return self._keep(key, bytes(data))
        self.sunk += 1
        return "sunk"

    async def _erase(self, key: str) -> None:
        if self.kept.pop(key, None) is None:
            self.erased += 1

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        for key in itertools.chain(self._names(), sorted(self.kept)):
            if key.startswith(prefix):
                yield key

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        keys: set[str] = set()
        folders: set[str] = set()
        async for key in self._list(prefix):
            head, sep, _ = key[len(prefix) :].partition("/")
            (folders if sep else keys).add(prefix + head + sep)
        return sorted(keys), sorted(folders)


def sink() -> SyntheticStore:
    """A store that keeps JSON documents and drops everything else."""
    return SyntheticStore()


Factory = Callable[[int], SyntheticStore]
