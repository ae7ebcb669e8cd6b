"""OME-Zarr 0.4 group attributes as OME-Zarr 0.5 attributes. Pure: JSON in, JSON out.

OME-Zarr 0.5 is 0.4's metadata on Zarr v3, with three changes this module makes:

* every OME member of an OME group's attributes (``multiscales``, ``omero``,
  ``labels``, ``image-label``, ``plate``, ``well``, ``bioformats2raw.layout``, and the
  ``series`` of a bioformats2raw layout's ``OME`` group) moves under one ``ome`` key,
  next to ``"version": "0.5"``; other attributes stay where they are. Which groups are
  OME groups is :func:`is_ome`'s to say: plain attributes with the same names are left
  alone;
* the per-member ``version`` fields (of each multiscale, ``plate``, ``well`` and
  ``image-label``) are dropped: the ``ome`` key's version is the one version;
* each array of a multiscale gets ``dimension_names``: the names of its axes
  (:func:`dimension_names`).

Axes, coordinate transformations, datasets, channel rendering (``omero``), label
colours and properties, and plate/well layouts are carried over unchanged.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Mapping
from typing import Any, Literal

from asyncshard.errors import InvalidMetadataError

__all__ = ["OME_MEMBERS", "Role", "dimension_names", "is_ome", "ome_version", "role_of", "to_v05"]

#: The members of a group's attributes that OME-Zarr defines.
OME_MEMBERS = (
    "multiscales",
    "omero",
    "labels",
    "image-label",
    "plate",
    "well",
    "bioformats2raw.layout",
)
#: Members that carried their own ``version`` up to 0.4.
_VERSIONED = ("plate", "well", "image-label")
#: What a group is to its OME parent: an image's ``labels`` group, or a bioformats2raw
#: layout's ``OME`` group (whose ``series`` moves under ``ome`` too).
Role = Literal["labels", "series"]
MIGRATED_FROM = "0.4"
MIGRATED_TO = "0.5"


def is_ome(attributes: Mapping[str, Any], role: Role | None = None) -> bool:
    """Whether group attributes are OME-Zarr metadata: an ``ome`` object (0.5), a member
    that carries its own ``version`` (0.4), a ``bioformats2raw.layout``, or the ``role``
    the group plays under an OME parent (its ``labels`` group, a bioformats2raw layout's
    ``OME`` group). A plain attribute that happens to be called ``labels`` or ``well``
    is not."""
    if isinstance(attributes.get("ome"), Mapping):
        return True
    return (
        ome_version(attributes) is not None
        or "bioformats2raw.layout" in attributes
        or role is not None
    )


def ome_version(attributes: Mapping[str, Any]) -> str | None:
    """The OME-Zarr version of group attributes: the ``ome`` key's, else the first
    version found in a 0.4-style member; ``None`` if they name none."""
    ome = attributes.get("ome")
    if isinstance(ome, Mapping):
        version = ome.get("version")
        return version if isinstance(version, str) else None
    for name in ("multiscales", *_VERSIONED):
        member = attributes.get(name)
        items = member if isinstance(member, list) else [member]
        for item in items:
            if isinstance(item, Mapping) and isinstance(item.get("version"), str):
                return str(item["version"])
    return None


def role_of(name: str, parent: Mapping[str, Any] | None) -> Role | None:
    """The role a group called ``name`` plays under a parent group with attributes
    ``parent``: the ``labels`` group of an image, or the ``OME`` group of a
    bioformats2raw layout."""
    if parent is None:
        return None
    ome = parent.get("ome")
    members = ome if isinstance(ome, Mapping) else parent
    if name == "labels" and "multiscales" in members and is_ome(parent):
        return "labels"
    if name == "OME" and "bioformats2raw.layout" in members:
        return "series"
    return None


def to_v05(
    attributes: Mapping[str, Any], where: str = "", role: Role | None = None
) -> dict[str, Any]:
    """The 0.5 attributes of a 0.4 group (see :func:`is_ome`); 0.5 and plain attributes
    come back as they are.

    ``InvalidMetadataError`` for another OME-Zarr version (0.1-0.3 lack the axes 0.5
    needs), for OME members that are not what 0.4 says they are, or for an ``ome``
    attribute that is not OME-Zarr 0.5's.
    """
    if not is_ome(attributes, role) or isinstance(attributes.get("ome"), Mapping):
        return copy.deepcopy(dict(attributes))
    version = ome_version(attributes)
    if version not in (MIGRATED_FROM, None):
        raise InvalidMetadataError(
            f"{where or '/'}: OME-Zarr {version} is not migrated (only {MIGRATED_FROM} is)"
        )
    if "ome" in attributes:
        raise InvalidMetadataError(f"{where or '/'}: an 'ome' attribute that is not an object")
    members = (*OME_MEMBERS, "series") if role == "series" else OME_MEMBERS
    out = {k: copy.deepcopy(v) for k, v in attributes.items() if k not in members}
    ome: dict[str, Any] = {"version": MIGRATED_TO}
    for name in members:
        if name not in attributes:
            continue
        value = copy.deepcopy(attributes[name])
        if name == "multiscales":
            if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
                raise InvalidMetadataError(f"{where or '/'}: multiscales is not a list of objects")
            for multiscale in value:
                multiscale.pop("version", None)
        elif name in _VERSIONED:
            if not isinstance(value, dict):
                raise InvalidMetadataError(f"{where or '/'}: {name} is not an object")
            value.pop("version", None)
        ome[name] = value
    out["ome"] = ome
    return out


def dimension_names(attributes: Mapping[str, Any], group: str) -> dict[str, list[str]]:
    """``{array path: axis names}`` for the arrays of the multiscales of the group at
    ``group`` (paths relative to the hierarchy root); 0.4 or 0.5 attributes."""
    ome = attributes.get("ome")
    source = ome if isinstance(ome, Mapping) else attributes
    found: dict[str, list[str]] = {}
    multiscales = source.get("multiscales")
    if not isinstance(multiscales, list):
        return found
    for multiscale in multiscales:
        if not isinstance(multiscale, Mapping):
            continue
        axes = multiscale.get("axes")
        if not isinstance(axes, list):
            continue
        names = [a.get("name") if isinstance(a, Mapping) else a for a in axes]
        if not all(isinstance(n, str) for n in names):
            continue
        for dataset in multiscale.get("datasets") or []:
            path = dataset.get("path") if isinstance(dataset, Mapping) else None
            if isinstance(path, str):
                joined = posixpath.normpath(posixpath.join(group, path)).lstrip("/")
                found[joined] = [str(n) for n in names]
    return found
