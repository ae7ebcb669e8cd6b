"""The byte budget of response bodies: sizes it grants, waiting in order, no leaks."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.server.budget import ByteBudget

KiB = 1024


async def test_full_pieces_while_half_is_free_then_small_ones() -> None:
    budget = ByteBudget(1024 * KiB, small=64 * KiB)
    assert await budget.acquire(256 * KiB) == 256 * KiB
    assert await budget.acquire(256 * KiB) == 256 * KiB  # leaves exactly half
    assert await budget.acquire(256 * KiB) == 64 * KiB
    assert await budget.acquire(16 * KiB) == 16 * KiB, "never more than asked"
    assert budget.free == 1024 * KiB - 592 * KiB


async def test_waiters_are_served_in_order_and_cancelled_ones_leak_nothing() -> None:
    budget = ByteBudget(128 * KiB, small=64 * KiB)
    held = await budget.acquire(128 * KiB)
    assert held == 64 * KiB  # taking all would leave less than half
    held += await budget.acquire(64 * KiB)
    assert budget.free == 0
    first = asyncio.create_task(budget.acquire(64 * KiB))
    gone = asyncio.create_task(budget.acquire(64 * KiB))
    last = asyncio.create_task(budget.acquire(64 * KiB))
    await asyncio.sleep(0)
    gone.cancel()  # a client that went away while waiting
    budget.release(64 * KiB)
    assert await first == 64 * KiB
    assert not last.done()
    budget.release(64 * KiB)
    assert await last == 64 * KiB
    with pytest.raises(asyncio.CancelledError):
        await gone
    budget.release(128 * KiB)
    assert budget.free == budget.total


async def test_a_grant_to_a_cancelled_waiter_is_returned() -> None:
    budget = ByteBudget(64 * KiB, small=64 * KiB)
    await budget.acquire(64 * KiB)
    waiter = asyncio.create_task(budget.acquire(64 * KiB))
    await asyncio.sleep(0)
    budget.release(64 * KiB)  # granted to the waiter...
    waiter.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.free == budget.total


async def test_reservations_shrink_and_release_once() -> None:
    budget = ByteBudget(1024 * KiB)
    async with budget.reserve(300 * KiB) as reservation:
        assert reservation.size == 300 * KiB
        reservation.keep(10 * KiB)
        assert budget.free == 1014 * KiB
        reservation.release()
        reservation.release()
        assert budget.free == budget.total
    assert budget.free == budget.total
    with pytest.raises(RuntimeError):
        async with budget.reserve(300 * KiB):
            raise RuntimeError("a failed request")
    assert budget.free == budget.total


async def test_try_reserve_takes_only_what_is_free_at_once() -> None:
    """The server's one-step answers reserve their bytes without waiting, or not at all
    (they are read the usual way then): never past the budget, never ahead of waiters."""
    budget = ByteBudget(128 * KiB, small=16 * KiB)
    first = budget.try_reserve(32 * KiB)
    assert first is not None and first.size == 32 * KiB and budget.free == 96 * KiB
    assert budget.try_reserve(48 * KiB) is None, "only a small piece would be granted"
    assert budget.free == 96 * KiB, "a refused try takes nothing"
    second = budget.try_reserve(16 * KiB)
    assert second is not None and budget.free == 80 * KiB
    while budget.free:  # drain the rest
        await budget.acquire(16 * KiB)
    assert budget.try_reserve(1) is None
    blocked = asyncio.create_task(budget.acquire(16 * KiB))
    await asyncio.sleep(0)
    first.release()  # 32 KiB back: the waiter is served first
    assert await blocked == 16 * KiB
    assert budget.free == 16 * KiB
    assert await budget.acquire(16 * KiB) == 16 * KiB
    waiting = asyncio.create_task(budget.acquire(16 * KiB))
    await asyncio.sleep(0)
    budget.release(8 * KiB)  # free now, but not enough for the waiter
    assert not waiting.done()
    assert budget.try_reserve(1) is None, "others wait: no overtaking"
    second.release()
    assert await waiting == 16 * KiB
    first.release()  # idempotent
    assert budget.free == 8 * KiB
