"""The ``nonempty_chunks`` manifest: a sorted list of the stored chunk keys of an array.

Spec 002 keeps it as an array attribute so that "which chunks exist" needs no listing
and no shard index reads. Keys are the array's chunk keys relative to the array folder
(``c/0/1``, or ``c.0.1`` with the ``.`` separator); for a sharded array they are the
inner chunk keys, i.e. what the chunk would be called in the flat layout. The list is
sorted as strings.

Conversions write it from what they moved (exactly the chunks now stored);
:func:`stored_chunks` rebuilds it from the data (listing plus one index read per shard).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Mapping
from typing import Any

from asyncshard.convert.layout import MANIFEST_ATTRIBUTE, ArrayLayout
from asyncshard.convert.tasks import read_present_chunks
from asyncshard.formats.zarr3.metadata import Coords
from asyncshard.store import Store

__all__ = ["manifest_keys", "manifest_of", "stored_chunks", "with_manifest"]

_READ_CONCURRENCY = 64


def manifest_keys(layout: ArrayLayout, chunks: Iterable[Coords]) -> list[str]:
    """The manifest of ``chunks`` under ``layout``'s key encoding: sorted chunk keys."""
    return sorted(layout.manifest_key(c) for c in chunks)


def manifest_of(doc: Mapping[str, Any]) -> list[str] | None:
    """The manifest stored in an array document, or ``None``."""
    attributes = doc.get("attributes")
    if not isinstance(attributes, Mapping):
        return None
    value = attributes.get(MANIFEST_ATTRIBUTE)
    return list(value) if isinstance(value, list) else None


def with_manifest(doc: Mapping[str, Any], keys: list[str] | None) -> dict[str, Any]:
    """``doc`` with its manifest set to ``keys`` (removed if ``None``)."""
    out = copy.deepcopy(dict(doc))
    attributes = dict(out.get("attributes") or {})
    if keys is None:
        attributes.pop(MANIFEST_ATTRIBUTE, None)
    else:
        attributes[MANIFEST_ATTRIBUTE] = keys
    out["attributes"] = attributes
    return out


async def stored_chunks(store: Store, layout: ArrayLayout) -> list[Coords]:
    """The (inner) chunks stored for ``layout``, from a listing and the shard indexes."""
    objects = []
    async for key in store.list_prefix(layout.prefix):
        coords = layout.parse_object_key(key)
        if coords is not None and layout.object_in_bounds(coords):
            objects.append(coords)
    if not layout.sharded:
        return sorted(objects)
    limit = asyncio.Semaphore(_READ_CONCURRENCY)

    async def chunks_of(shard: Coords) -> list[Coords]:
        async with limit:
            return (await read_present_chunks(store, layout, shard))[0]

    found = await asyncio.gather(*(chunks_of(s) for s in objects))
    return sorted(c for chunks in found for c in chunks)
