"""What serves a key of the unsharded view: its dataset's metadata, a chunk, a hidden
shard file or the wrapped store; and the virtual versions of what the view derives.

Versions of rewritten metadata and virtual chunks are the underlying versions with the
prefix ``unshard:``, so they never collide with the versions of the raw objects at the
same keys (an HTTP cache revalidating one against the other must not match).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from asyncshard.errors import AsyncShardError, ConflictError, InvalidKeyError
from asyncshard.sharding.engine import Location
from asyncshard.store import ObjectMeta
from asyncshard.views.datasets import Scope
from asyncshard.views.folders import Node

log = logging.getLogger("asyncshard.views")

VERSION_PREFIX = "unshard:"
#: Name of the documents that may be groups with consolidated metadata.
GROUP_DOCUMENT = "zarr.json"


def virtual_version(version: str | None) -> str | None:
    """The version the view reports for an object derived from one at ``version``."""
    return None if version is None else VERSION_PREFIX + version


def inner_version(key: str, if_match: str | None) -> str | None:
    """The underlying version a caller's virtual ``if_match`` names (``ConflictError``
    for a version the view never gave out)."""
    if if_match is None:
        return None
    if not if_match.startswith(VERSION_PREFIX):
        raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
    return if_match[len(VERSION_PREFIX) :]


def is_group_document(key: str) -> bool:
    """Whether ``key`` names a document that may be a group's."""
    return key.rpartition("/")[2] == GROUP_DOCUMENT


def virtual_meta(meta: ObjectMeta) -> ObjectMeta:
    """``meta`` with its virtual version."""
    return ObjectMeta(meta.key, meta.size, virtual_version(meta.version), meta.last_modified)


@contextlib.contextmanager
def parsing(key: str) -> Iterator[None]:
    """Turn a ``ValueError``/``OverflowError`` out of a dataset's key parsing into
    :class:`InvalidKeyError` (``400``): a key no parser can read is the client's error."""
    try:
        yield
    except AsyncShardError:
        raise  # already typed (some are ValueErrors too)
    except (ValueError, OverflowError) as exc:
        log.warning("unparsable key %.200r: %s: %.200s", key, type(exc).__name__, exc)
        raise InvalidKeyError(f"cannot parse the key {key[:200]!r}") from None


@dataclass(frozen=True)
class Chunk:
    """A chunk key of a dataset: its scope (sharded store), its key and location there."""

    scope: Scope
    rel: str
    node: Node
    loc: Location[Any]


class Hidden:
    """A key the view hides: a shard file of a sharded precomputed scale."""


HIDDEN = Hidden()
#: What serves a key: the dataset's node (its metadata key), a chunk, a hidden shard
#: file, or ``None`` (the wrapped store, unchanged).
Target: TypeAlias = Node | Chunk | Hidden | None


def target_in(node: Node, key: str) -> Target:
    """The chunk ``key`` names in the node's dataset, ``HIDDEN`` for a shard file,
    else ``None``."""
    assert node.dataset is not None
    with parsing(key):
        for scope in node.dataset.scopes:
            rel = scope.key(key)
            if rel is None:
                continue
            fmt = scope.store.format
            loc = fmt.locate(rel)
            if loc is not None:
                return Chunk(scope, rel, node, loc)
            if fmt.is_shard(fmt.inner_key(rel)):
                return HIDDEN
    return None
