"""What zarr-python sees of an asyncshard store: the key space each mode presents.

* ``"pass-through"``: the store itself, keys unchanged. zarr-python reads and writes
  shards with its own sharding codec; asyncshard supplies the backend, the request
  counters, coalesced ``get_partial_values`` and conditional shard rewrites
  (:mod:`~asyncshard.zarr_python.guard`).
* ``"inner-chunks"``: a view in which sharded arrays look unsharded (inner chunks at
  their own keys, served out of the shards through asyncshard's index cache).
"""

from __future__ import annotations

import warnings
from typing import Final, Literal, get_args

from asyncshard.errors import StoreConfigError
from asyncshard.store import Store

Mode = Literal["pass-through", "inner-chunks"]
#: Seconds the inner-chunk view trusts what a folder holds (see docs/ARCHITECTURE.md).
METADATA_TTL = 10.0
#: Seconds a chunk write waits for more writes of its shard (see views/gate.py).
WRITE_WINDOW = 0.002


def _zarr_concurrency() -> int:
    """zarr-python's bound on chunk reads and writes in flight per array operation."""
    import zarr

    return int(zarr.config.get("async.concurrency"))


class ShardRewriteWarning(UserWarning):
    """zarr-python's ``async.concurrency`` makes the inner-chunk view rewrite shards in
    parts: raise it to at least the chunks per shard."""


def _cut_short(size: int) -> None:
    """Warn that a shard of ``size`` chunks was written in parts because of zarr's bound
    (once per process and shard size, as Python shows a warning once per message and
    location)."""
    n = _zarr_concurrency()
    warnings.warn(
        f"zarr-python's 'async.concurrency' ({n}) is below the {size} chunks of a shard, "
        "so the inner-chunk view wrote a shard in parts: it holds a shard's chunk writes "
        f"until they cover the shard or until {n} per array operation wait (zarr-python "
        "hands over no more at once), and more writes of that shard followed. Whether "
        "they come from one array operation or from many at once, each part is another "
        "read-merge-write of the shard. To write each shard once: "
        f"zarr.config.set({{'async.concurrency': {size}}}) or more",
        ShardRewriteWarning,
        stacklevel=1,  # called by the event loop: this line is the one location
    )


MODES: Final[tuple[str, ...]] = get_args(Mode)


def present(inner: Store, mode: str) -> Store:
    """The asyncshard Store whose keys zarr-python addresses in ``mode``.

    This is the one place where the modes differ: everything else in
    :class:`~asyncshard.zarr_python.ZarrStore` talks to the Store returned here.
    """
    if mode == "pass-through":
        return inner
    if mode == "inner-chunks":
        from asyncshard.views.unsharded import UnshardedView

        return UnshardedView(
            inner,
            writable=True,
            list_chunks=True,
            recheck_metadata=True,
            metadata_ttl=METADATA_TTL,
            write_window=WRITE_WINDOW,
            write_flush_at=_zarr_concurrency,
            write_cut_short=_cut_short,
            # zarr-python reads a region's chunks in bursts of async.concurrency:
            # batching all of a burst coalesces them (the lean path would read the
            # first of each tick alone)
            lean_reads=False,
        )
    raise StoreConfigError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
