"""Consolidated metadata of a converted copy, in the form zarr-python writes it.

A group's ``zarr.json`` may carry the documents of everything below it
(``consolidated_metadata``: ``{"kind": "inline", "must_understand": false, "metadata":
{relative path: document}}``, nested groups with an empty one of their own), so that a
reader such as ``xr.open_zarr`` opens the hierarchy in one read. A copy
(:mod:`asyncshard.convert.migrate`) writes it into each group whose source had
consolidated metadata (a v3 ``consolidated_metadata`` or a v2 ``.zmetadata``), from the
documents the copy wrote: the sharded arrays as they now are, not the source's.
In-place conversions keep it up to date array by array
(:class:`~asyncshard.convert.zarr_array.ZarrArray`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncshard.convert.hierarchy import HierarchyNode, walk_hierarchy
from asyncshard.convert.journal import normalize
from asyncshard.convert.pipeline import Doc, write_json
from asyncshard.convert.zarr_array import META, array_prefix, read_doc
from asyncshard.store import Store

__all__ = ["consolidate", "consolidated_metadata", "without_consolidated"]

KEY = "consolidated_metadata"


def _inline(metadata: dict[str, Any]) -> Doc:
    return {"kind": "inline", "must_understand": False, "metadata": metadata}


def consolidated_metadata(nodes: Sequence[HierarchyNode], group: str) -> Doc:
    """The ``consolidated_metadata`` of the group at ``group``: the v3 documents of the
    ``nodes`` below it, keyed by their path relative to it."""
    prefix = f"{group}/" if group else ""
    metadata: dict[str, Any] = {}
    for node in nodes:
        if node.path == group or not node.path.startswith(prefix):
            continue
        doc = {k: v for k, v in node.meta.items() if k != KEY}
        if node.kind == "group":  # explicit: nothing more below it than listed here
            doc[KEY] = _inline({})
        metadata[node.path[len(prefix) :]] = doc
    return _inline(metadata)


async def consolidate(store: Store, groups: Sequence[str]) -> None:
    """Write the consolidated metadata of each group at ``groups`` in ``store`` (Zarr v3)
    from what the store holds below it; a group whose document has it already is
    rewritten only if it changed."""
    if not groups:
        return
    nodes = await walk_hierarchy(store, frozenset({3}))
    for group in groups:
        key = array_prefix(group) + META
        got = await read_doc(store, key)
        if got is None:
            continue
        doc, version = got
        wanted = consolidated_metadata(nodes, group)
        if normalize(doc.get(KEY)) != normalize(wanted):
            await write_json(store, key, {**doc, KEY: wanted}, version)


def without_consolidated(doc: Doc) -> Doc:
    """``doc`` without its consolidated metadata (to compare group documents)."""
    return {k: v for k, v in doc.items() if k != KEY}
