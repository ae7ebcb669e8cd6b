"""The plumbing of the public conversion functions: their keywords (storage options
folded into one dict) and the synchronous twins of the ``*_async`` functions."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Collection, Coroutine, Mapping
from typing import Any, ParamSpec, TypeVar

from asyncshard import loops
from asyncshard.backends.registry import merge_options, split_options

__all__ = ["blocking", "fold_storage_options", "run_sync"]

T = TypeVar("T")
P = ParamSpec("P")


def fold_storage_options(options: Mapping[str, Any], own: Collection[str]) -> dict[str, Any]:
    """``options`` with every key not in ``own`` (and ``storage_options``) folded into one
    ``storage_options`` dict: keywords and the dict are the same thing (docs/cloud.md)."""
    mine, rest = split_options(options, {*own, "storage_options"})
    mine["storage_options"] = merge_options(mine.get("storage_options"), rest)
    return mine


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a conversion coroutine from synchronous code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return loops.run(coro)
    coro.close()
    raise RuntimeError(
        "an event loop is running: await the *_async variant of this function instead"
    )


def blocking(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The synchronous twin of a ``*_async`` function: same arguments, same result."""

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(func(*args, **kwargs))

    run.__name__ = run.__qualname__ = func.__name__.removesuffix("_async")
    run.__doc__ = f"Synchronous :func:`{func.__name__}`.\n\n{func.__doc__ or ''}"
    return run
