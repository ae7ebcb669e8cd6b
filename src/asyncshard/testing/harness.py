"""The harness: what the conformance suite needs to know about a store under test.

A :class:`Harness` holds the store and says how to seed it, how the suite's test keys
become the store's keys (:data:`KeyMapper`), which counters it keeps (:data:`Profile`)
and which documented deviations it has (``quirks``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from asyncshard.errors import InvalidKeyError
from asyncshard.store import Store, validate_key
from asyncshard.wrapper import WrapperStore

__all__ = [
    "OPERATIONS",
    "REQUESTS",
    "ChunkKeys",
    "Harness",
    "KeyMapper",
    "Profile",
    "Seeder",
    "identity",
]

#: Puts objects (keys already mapped to the store's keys) in place, by any means.
Seeder = Callable[[Mapping[str, bytes]], Awaitable[None]]
#: The store's key for one of the suite's test keys.
KeyMapper = Callable[[str], str]
#: What ``stats`` counts: ``"requests"`` sent to a backend (backends), or logical
#: ``"operations"``, one per key and verb of each call (adapters and views).
Profile = Literal["requests", "operations"]
REQUESTS: Profile = "requests"
OPERATIONS: Profile = "operations"


def identity(key: str) -> str:
    """The pass-through key mapper: test keys are the store's keys."""
    return key


class ChunkKeys:
    """A key mapper onto chunk keys: the n-th distinct test key becomes ``name(n)``.

    Distinct test keys get distinct keys (checked), so ``name`` chooses how they spread
    over shards (e.g. ``lambda n: f"arr/c/{3 * n}"``: about three per shard of 8). With
    ``mixed``, every second test key stays as it is (a pass-through key outside the
    dataset), so that single calls mix chunks and plain keys. Keys that fail key
    validation are returned unchanged, so the store still sees them. One mapper per
    harness: assignments depend on the order keys are first seen.
    """

    def __init__(self, name: Callable[[int], str], *, mixed: bool = False) -> None:
        self._name = name
        self._mixed = mixed
        self._assigned: dict[str, str] = {}
        self._used: set[str] = set()

    def __call__(self, key: str) -> str:
        try:
            validate_key(key)
        except InvalidKeyError:
            return key
        found = self._assigned.get(key)
        if found is None:
            n = len(self._assigned)
            found = key if self._mixed and n % 2 else self._name(n)
            if found in self._used:
                raise ValueError(f"{found!r} assigned twice: the mapping is not injective")
            self._assigned[key] = found
            self._used.add(found)
        return found


@dataclass
class Harness:
    """A store under test.

    Attributes:
        store: a fresh store, empty but for ``present_keys``.
        seeder: puts objects in place (for read-only stores, behind the store's back);
            default: ``store.set``.
        quirks: documented deviations of the store, name -> reason (shown in skips).
        keys: maps the suite's test keys to the store's keys (default: identity).
        structured: whether ``keys`` keeps the ``/`` structure of test keys: a fixed
            string in front or nothing, so ``keys(p + s) == keys(p) + s``. The listing
            tests about the test tree's folders run only then; every mapping runs the
            listing tests derived from the stored keys.
        profile: which counters the store keeps; default ``"operations"`` for wrappers
            (adapters, views) and ``"requests"`` for every other store.
        present_keys: keys a fresh store already holds and lists (dataset metadata).
    """

    store: Store
    seeder: Seeder | None = None
    quirks: Mapping[str, str] = field(default_factory=dict)
    keys: KeyMapper = identity
    structured: bool = True
    profile: Profile | None = None
    present_keys: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.profile is None:
            self.profile = OPERATIONS if isinstance(self.store, WrapperStore) else REQUESTS

    def key(self, key: str) -> str:
        """The store's key for a test key."""
        return self.keys(key)

    def prefix(self, prefix: str) -> str:
        """The store's listing prefix for a test prefix (structured mappings only)."""
        if not self.structured:
            raise ValueError("test prefixes have no image under an unstructured key mapping")
        return self.keys(prefix + "x")[:-1]

    def count(self, *, requests: int, operations: int) -> int:
        """The expected value of a counter under this harness's profile."""
        return requests if self.profile == REQUESTS else operations

    async def seed(self, objects: Mapping[str, bytes]) -> None:
        """Create ``objects`` (by test key) and reset the store's counters."""
        mapped = {self.key(k): v for k, v in objects.items()}
        if self.seeder is not None:
            await self.seeder(mapped)
        else:
            for key, value in mapped.items():
                await self.store.set(key, value)
        self.store.stats.reset()
