"""The ``nonempty_chunks`` manifest: the sorted list of an array's stored chunks.

The zarr-vectors sharding guide keeps it as an array attribute so that "which chunks
exist" needs no listing and no shard index reads. Two forms exist:

* ``zarr-vectors`` (what zarr-vectors writes and reads, and what asyncshard writes): the
  chunk's grid coordinates plus the array's ``chunk_grid_origin`` attribute (zeros when
  absent; it can be negative), joined by ``.``: ``"-2.0.1"``. The list is sorted as
  strings. It names cells, not objects, so it is the same flat or sharded.
* ``chunk-keys`` (written by asyncshard 0.1): the chunk keys relative to the array under
  its current key encoding (``c/0/1``, ``c.0.1``); it changes with the encoding.

The manifest is bounded: a document every reader parses must not grow with the data
(16.8 bytes a chunk: 17 MB at a million chunks). Conversions write one of at most
:data:`MANIFEST_LIMIT` chunks; an array with more gets none (readers list the chunks
instead, as zarr-vectors does without one), and a ``chunk-keys`` manifest that the
conversion would have to rewrite beyond it is removed rather than left wrong. Collecting
it costs at most that many coordinates in memory.

A conversion never changes a manifest's form. A ``zarr-vectors`` manifest stays as it is
(the conversion moves cells, it does not change which cells are stored); a
``chunk-keys`` manifest is rewritten under the new encoding from the chunks moved; one
that is neither is left untouched with a :class:`ManifestWarning`. Where none exists,
conversions add a ``zarr-vectors`` manifest.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from asyncshard.convert.layout import MANIFEST_ATTRIBUTE, ArrayLayout
from asyncshard.convert.tasks import read_present_chunks
from asyncshard.formats.zarr3.keys import Coords
from asyncshard.store import Store
from asyncshard.walk import iter_keys

__all__ = [
    "MANIFEST_LIMIT",
    "ORIGIN_ATTRIBUTE",
    "REMOVE",
    "ManifestForm",
    "ManifestWarning",
    "manifest_form",
    "manifest_keys",
    "manifest_of",
    "stored_chunks",
    "switched_manifest",
    "with_manifest",
]

#: The attribute of zarr-vectors arrays giving the grid coordinates of cell ``(0, ...)``.
ORIGIN_ATTRIBUTE = "chunk_grid_origin"
#: Chunks a manifest written by a conversion lists at most (about 280 KB of JSON).
MANIFEST_LIMIT = 16_384
#: What :func:`switched_manifest` returns to remove the attribute.
REMOVE: Literal["remove"] = "remove"

ManifestForm = Literal["zarr-vectors", "chunk-keys"]

_READ_CONCURRENCY = 64


class ManifestWarning(UserWarning):
    """A ``nonempty_chunks`` attribute in an unknown form was left as it is."""


def _origin(doc: Mapping[str, Any], ndim: int) -> Coords:
    """The ``chunk_grid_origin`` of an array document (zeros when absent)."""
    raw = (doc.get("attributes") or {}).get(ORIGIN_ATTRIBUTE)
    if not raw:  # zarr-vectors stores no origin when it is zero
        return (0,) * ndim
    if (
        not isinstance(raw, list)
        or len(raw) != ndim
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw)
    ):
        raise ValueError(f"{ORIGIN_ATTRIBUTE} {raw!r} is not {ndim} integers")
    return tuple(raw)


@functools.lru_cache(maxsize=32)
def _plain_vector_key(ndim: int) -> re.Pattern[str]:
    """``ndim`` ``.``-joined ASCII decimal integers: the keys zarr-vectors writes."""
    return re.compile(r"-?[0-9]+(?:\.-?[0-9]+)" + f"{{{ndim - 1}}}")


def _vector_key(key: str, ndim: int) -> bool:
    """Whether ``key`` parses as zarr-vectors does (``int`` of every ``.`` part)."""
    if ndim == 0:
        return key == ""
    limit = sys.get_int_max_str_digits()  # int() refuses longer numbers
    if (not limit or len(key) <= limit) and _plain_vector_key(ndim).fullmatch(key):
        return True  # the common form, without a split
    parts = key.split(".")
    if len(parts) != ndim:
        return False
    try:
        for part in parts:
            int(part)
    except ValueError:
        return False
    return True


def manifest_of(doc: Mapping[str, Any]) -> Any:
    """The raw manifest value of an array document, or ``None``."""
    attributes = doc.get("attributes")
    if not isinstance(attributes, Mapping):
        return None
    return attributes.get(MANIFEST_ATTRIBUTE)


def manifest_form(doc: Mapping[str, Any], layout: ArrayLayout) -> ManifestForm | None:
    """The form of the manifest in ``doc`` (``None``: no manifest).

    Raises ``ValueError`` for a manifest in neither form. An empty list counts as
    ``zarr-vectors`` (kept as it is). Keys valid in both forms (``v2`` keys with the
    ``.`` separator look like ``0.1``) count as ``zarr-vectors``.
    """
    value = manifest_of(doc)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{MANIFEST_ATTRIBUTE} is not a list of strings")
    if all(_vector_key(k, layout.ndim) for k in value):
        return "zarr-vectors"
    keys = layout.encoding
    bad = [k for k in value if keys.decode(k, layout.ndim) is None]
    if bad:
        raise ValueError(
            f"{MANIFEST_ATTRIBUTE} holds keys in an unknown form (e.g. {bad[0]!r}); expected "
            f"{layout.ndim} '.'-joined integers (zarr-vectors) or chunk keys like "
            f"{keys.encode((0,) * layout.ndim)!r}"
        )
    return "chunk-keys"


def manifest_keys(
    form: ManifestForm, doc: Mapping[str, Any], layout: ArrayLayout, chunks: Iterable[Coords]
) -> list[str]:
    """The manifest of ``chunks`` in ``form`` (``layout``: the layout they are in)."""
    if form == "chunk-keys":
        return sorted(layout.manifest_key(c) for c in chunks)
    origin = _origin(doc, layout.ndim)
    return sorted(
        ".".join(str(c + o) for c, o in zip(chunk, origin, strict=True)) for chunk in chunks
    )


def switched_manifest(
    doc: Mapping[str, Any],
    source: ArrayLayout,
    target: ArrayLayout,
    chunks: Iterable[Coords] | None,
    *,
    add: bool,
    name: str,
) -> tuple[list[str] | Literal["remove"] | None, str | None]:
    """The manifest to store with ``target`` after a pass, and a note for the report.

    ``doc``: the array document before the switch (layout ``source``); ``chunks``: the
    chunks the pass moved, ``None`` when more than :data:`MANIFEST_LIMIT`. ``None``
    leaves the attribute as it is: a ``zarr-vectors`` manifest (still right), an
    unknown one (warned about, and the note says so), or none with ``add`` false (or
    too many chunks to add one); :data:`REMOVE` removes a ``chunk-keys`` manifest
    that too many chunks would have to list.
    """
    try:
        form = manifest_form(doc, source)
        if chunks is None and (form == "chunk-keys" or (form is None and add)):
            note = (
                f"{MANIFEST_ATTRIBUTE} {'removed' if form else 'not written'}: more than "
                f"{MANIFEST_LIMIT} chunks (readers list them)"
            )
            return (REMOVE if form else None), note
        if form is None and add:
            return manifest_keys("zarr-vectors", doc, target, chunks or ()), None
        if form == "chunk-keys":
            return manifest_keys(form, doc, target, chunks or ()), None
        return None, None
    except ValueError as exc:
        note = f"{MANIFEST_ATTRIBUTE} left unchanged: {exc}"
        warnings.warn(f"{name or '/'}: {note}", ManifestWarning, stacklevel=2)
        return None, note


def with_manifest(
    doc: Mapping[str, Any], keys: list[str] | Literal["remove"] | None
) -> dict[str, Any]:
    """``doc`` with its manifest set to ``keys`` (``None``: unchanged; :data:`REMOVE`:
    removed)."""
    out = copy.deepcopy(dict(doc))
    if keys is not None:
        attributes = dict(out.get("attributes") or {})
        if keys == REMOVE:
            attributes.pop(MANIFEST_ATTRIBUTE, None)
        else:
            attributes[MANIFEST_ATTRIBUTE] = keys
        out["attributes"] = attributes
    return out


def _too_many() -> ValueError:
    return ValueError(f"more than {MANIFEST_LIMIT} chunks; a manifest lists at most that many")


async def stored_chunks(store: Store, layout: ArrayLayout) -> list[Coords]:
    """The (inner) chunks stored for ``layout``, from a listing and the shard indexes;
    ``ValueError`` beyond :data:`MANIFEST_LIMIT` (found without holding the rest)."""
    objects = []
    async for key in iter_keys(store, layout.prefix):
        coords = layout.parse_object_key(key)
        if coords is not None and layout.grid.object_in_bounds(coords):
            objects.append(coords)
            if len(objects) > MANIFEST_LIMIT:
                raise _too_many()
    if not layout.sharded:
        return sorted(objects)
    limit = asyncio.Semaphore(_READ_CONCURRENCY)

    async def chunks_of(shard: Coords) -> list[Coords]:
        async with limit:
            return (await read_present_chunks(store, layout, shard))[0]

    found = await asyncio.gather(*(chunks_of(s) for s in objects))
    chunks = sorted(c for chunks in found for c in chunks)
    if len(chunks) > MANIFEST_LIMIT:
        raise _too_many()
    return chunks
