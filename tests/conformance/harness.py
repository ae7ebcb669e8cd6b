"""What a conformance run needs from a store: the store and a way to seed objects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from asyncshard.store import Store

Seeder = Callable[[Mapping[str, bytes]], Awaitable[None]]


@dataclass
class Harness:
    """A store under test.

    ``seed`` puts objects in place by any means (for read-only stores, behind the
    store's back), then the counters are reset so tests count only their own requests.
    ``quirks`` names known, documented deviations of the backend, for visible skips.
    """

    store: Store
    seeder: Seeder | None = None
    quirks: frozenset[str] = field(default_factory=frozenset)

    async def seed(self, objects: Mapping[str, bytes]) -> None:
        """Create ``objects`` and reset the store's counters."""
        if self.seeder is not None:
            await self.seeder(objects)
        else:
            for key, value in objects.items():
                await self.store.set(key, value)
        self.store.stats.reset()
