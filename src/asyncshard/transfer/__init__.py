"""Moving whole folders between stores: :func:`copy_tree` and :func:`remove_tree`.

::

    from asyncshard import copy_tree

    summary = copy_tree("data/flat.zarr", "s3://bucket/flat.zarr")
    print(summary)  # 1024 objects copied (96.0MB), 0 already equal

Each has an ``*_async`` twin. The command line's ``cp -r`` and ``rm -r`` run them.
"""

from asyncshard.convert.api import blocking
from asyncshard.transfer.copying import DEFAULT_MAX_BUFFER, DEFAULT_PART_SIZE, copy_tree_async
from asyncshard.transfer.removing import remove_tree_async
from asyncshard.transfer.summary import CopiedObject, CopySummary

copy_tree = blocking(copy_tree_async)
"""Synchronous :func:`copy_tree_async`: the same arguments, the same
:class:`CopySummary` (call it where no event loop runs)."""
remove_tree = blocking(remove_tree_async)
"""Synchronous :func:`remove_tree_async`: the same arguments, the number deleted."""

__all__ = [
    "DEFAULT_MAX_BUFFER",
    "DEFAULT_PART_SIZE",
    "CopiedObject",
    "CopySummary",
    "copy_tree",
    "copy_tree_async",
    "remove_tree",
    "remove_tree_async",
]
