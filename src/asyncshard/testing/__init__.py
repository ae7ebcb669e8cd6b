"""asyncshard.testing: the Store conformance suite, shipped for any Store to run.

A store joins by subclassing :class:`StoreConformance` (or one of its parts,
:class:`ReadConformance`, :class:`WriteConformance`, :class:`ListingConformance`) in a
test module and providing a ``harness`` fixture that yields a :class:`Harness` around a
fresh store: how to seed it, how test keys map to its keys (:class:`ChunkKeys` for
adapters whose keys are chunk keys) and which counters it keeps.

The tests are coroutines, run by pytest-asyncio (an async ``harness`` fixture needs its
``auto`` mode or ``pytest_asyncio.fixture``). This package imports pytest (a test-time
dependency, in the ``test`` extra); ``import asyncshard`` never imports it.
"""

import pytest

# plain asserts in the suite's modules report their operands, as in test modules
pytest.register_assert_rewrite(
    "asyncshard.testing.listing", "asyncshard.testing.reads", "asyncshard.testing.writes"
)

from asyncshard.testing.harness import (  # noqa: E402
    OPERATIONS,
    REQUESTS,
    ChunkKeys,
    Harness,
    KeyMapper,
    Profile,
    Seeder,
    identity,
)
from asyncshard.testing.listing import ListingConformance  # noqa: E402
from asyncshard.testing.reads import HOSTILE_KEYS, ReadConformance  # noqa: E402
from asyncshard.testing.suite import StoreConformance  # noqa: E402
from asyncshard.testing.writes import WriteConformance  # noqa: E402

__all__ = [
    "HOSTILE_KEYS",
    "OPERATIONS",
    "REQUESTS",
    "ChunkKeys",
    "Harness",
    "KeyMapper",
    "ListingConformance",
    "Profile",
    "ReadConformance",
    "Seeder",
    "StoreConformance",
    "WriteConformance",
    "identity",
]
