"""What zarr-python sees of an asyncshard store: the key space each mode presents.

* ``"pass-through"``: the store itself, keys unchanged. zarr-python reads and writes
  shards with its own sharding codec; asyncshard supplies the backend, the request
  counters and coalesced ``get_partial_values``.
* ``"inner-chunks"``: a view in which sharded arrays look unsharded (inner chunks at
  their own keys, served out of the shards through asyncshard's index cache).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from asyncshard.errors import StoreConfigError
from asyncshard.store import Store

Mode = Literal["pass-through", "inner-chunks"]
MODES: Final[tuple[str, ...]] = get_args(Mode)


def present(inner: Store, mode: str) -> Store:
    """The asyncshard Store whose keys zarr-python addresses in ``mode``.

    This is the one place where the modes differ: everything else in
    :class:`~asyncshard.zarr_python.ZarrStore` talks to the Store returned here.
    """
    if mode == "pass-through":
        return inner
    if mode == "inner-chunks":
        # SEAM (inner-chunk view): the Store that presents sharded arrays unsharded.
        # Today the read-only view of ``asyncshard serve --unshard``; the writable view
        # (conditional read-merge-write of shards) replaces it here, and nothing else
        # changes: ZarrStore reports writes as supported when the view supports them.
        from asyncshard.views.unsharded import UnshardedView

        return UnshardedView(inner)
    raise StoreConfigError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
