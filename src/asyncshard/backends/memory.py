"""MemoryStore: a dict-backed Store, for tests, caches and demos."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store, check_condition

_versions = itertools.count(1)


class MemoryStore(Store):
    """Objects in a dict. Versions are process-unique counters; conditions are atomic."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._objects: dict[str, tuple[bytes, ObjectMeta]] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._objects)} objects)"

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        return self._get_now(key, byte_range, if_match)

    def _get_now(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        entry = self._objects.get(key)
        if entry is None:
            return None
        data, meta = entry
        check_condition(key, meta, if_match, False)
        start, end = resolve(byte_range, len(data))
        return GetResult(memoryview(data)[start:end], meta)

    async def _head(self, key: str) -> ObjectMeta | None:
        return self._head_now(key)

    def _head_now(self, key: str) -> ObjectMeta | None:
        entry = self._objects.get(key)
        return None if entry is None else entry[1]

    @property
    def supports_head_now(self) -> bool:
        return True

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        entry = self._objects.get(key)
        check_condition(key, entry and entry[1], if_match, if_absent)
        version = str(next(_versions))
        value = bytes(data)
        self._objects[key] = (value, ObjectMeta(key, len(value), version, datetime.now(UTC)))
        return version

    async def _erase(self, key: str) -> None:
        self._objects.pop(key, None)

    async def _erase_many(self, keys: Sequence[str]) -> None:
        """All at once; ``delete`` counts one per key, as every key is an operation."""
        self._count_request("delete", len(keys))
        for key in keys:
            self._objects.pop(key, None)

    @property
    def supports_conditional_deletes(self) -> bool:
        return True

    def version_pins_bytes(self, version: str) -> bool:
        return True  # a counter, never reused

    async def _erase_if_match(self, key: str, version: str) -> None:
        entry = self._objects.get(key)
        check_condition(key, entry and entry[1], version, False)
        del self._objects[key]

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        for key in sorted(k for k in self._objects if k.startswith(prefix)):
            yield key
