"""Open a Store from where it is: ``open_store("s3://bucket/prefix")``, ``open_store("/data")``.

The options contract (docs/cloud.md) lives here, once: every public entry point that
takes a location hands it to :func:`open_store` or :func:`opened`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.errors import UnknownOptionError, UnknownSchemeError
from asyncshard.store import Store
from asyncshard.suggest import did_you_mean

__all__ = [
    "StoreLocation",
    "merge_options",
    "open_store",
    "opened",
    "refuse_malformed_scheme",
    "refuse_unknown",
    "register_scheme",
    "split_options",
    "supported_schemes",
]

Opener = Callable[[str, dict[str, Any]], Store]
#: Where a store is: a URL or path, a ready :class:`Store`, an obstore store or an
#: obspec client.
StoreLocation = str | os.PathLike[str] | Store | Any
_OPENERS: dict[str, Opener] = {}


def register_scheme(scheme: str, opener: Opener) -> None:
    """Make ``open_store`` open ``scheme://...`` URLs with ``opener(url, options)``."""
    _OPENERS[scheme.lower()] = opener


def supported_schemes() -> list[str]:
    """The URL schemes ``open_store`` knows."""
    return sorted(_OPENERS)


def merge_options(
    storage_options: Mapping[str, Any] | None, options: Mapping[str, Any]
) -> dict[str, Any]:
    """``storage_options={...}`` and keyword options as one dict; a name given both ways
    with different values is a ``TypeError``."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(f"storage_options must be a mapping, not {type(storage_options).__name__}")
    merged = dict(storage_options or {})
    for name, value in options.items():
        if name in merged and merged[name] is not value and merged[name] != value:
            raise TypeError(f"option {name!r} given twice: as a keyword and in storage_options")
        merged[name] = value
    return merged


def split_options(
    options: Mapping[str, Any], own: Collection[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(the options named in own, the rest)``: a layer's options and the storage ones."""
    mine = {k: v for k, v in options.items() if k in own}
    return mine, {k: v for k, v in options.items() if k not in own}


def refuse_unknown(options: Mapping[str, Any], accepted: Collection[str], where: str) -> None:
    """``UnknownOptionError`` naming every option of ``options`` not in ``accepted``."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        named = ", ".join(f"{name!r}{did_you_mean(name, accepted)}" for name in unknown)
        raise UnknownOptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {named} for {where}", unknown
        )


@functools.cache
def keyword_names(*callables: Callable[..., Any]) -> frozenset[str]:
    """The named keyword parameters of ``callables`` (what ``**options`` may carry on);
    computed once per set of callables, since every open asks."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return frozenset(
        p.name
        for c in callables
        for p in inspect.signature(c).parameters.values()
        if p.kind in kinds and p.name != "self"
    )


def open_store(
    location: StoreLocation, storage_options: Mapping[str, Any] | None = None, **options: Any
) -> Store:
    """The Store at ``location``: a URL (``s3://bucket/prefix``, ``file://``, ``memory://``,
    ...), a plain path, a ready :class:`Store` (returned as it is), an obstore store (a
    :class:`~asyncshard.backends.cloud.CloudStore` with its configuration) or an obspec
    client (:func:`~asyncshard.obspec.from_obspec`).

    Options are keywords or one ``storage_options`` dict (obstore's names for the
    backend's configuration, plus the store's own options). An option the store does
    not take is an :class:`~asyncshard.errors.UnknownOptionError` (a ``TypeError``),
    raised before any request; options with a ready Store are refused the same way.
    """
    opts = merge_options(storage_options, options)
    if isinstance(location, Store):
        refuse_unknown(opts, (), f"the ready store {location!r} (options apply to a URL)")
        return location
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        return _open_object(location, opts)
    url = location
    scheme, sep, _ = url.partition("://")
    if not sep:
        refuse_malformed_scheme(url)
        return _open_local(url, opts)
    opener = _OPENERS.get(scheme.lower())
    if opener is None:
        raise UnknownSchemeError(
            f"unsupported URL scheme {scheme!r} in {url!r}; supported: "
            + ", ".join(f"{s}://" for s in supported_schemes())
            + " and plain paths"
        )
    return opener(url, opts)


@asynccontextmanager
async def opened(
    location: StoreLocation, storage_options: Mapping[str, Any] | None = None, **options: Any
) -> AsyncIterator[Store]:
    """:func:`open_store` for the duration of a block: a store opened here is closed
    afterwards; a ready Store is lent, not closed."""
    store = open_store(location, storage_options, **options)
    if store is location:
        yield store
        return
    async with store:
        yield store


def _open_object(obj: Any, options: dict[str, Any]) -> Store:
    """An obstore store or an obspec client as a Store."""
    from asyncshard.backends.cloud.objects import is_obstore_store, local_root, obstore_location
    from asyncshard.obspec import ObspecClientStore, from_obspec, is_obspec_client

    if is_obstore_store(obj):
        root = local_root(obj)
        if root is not None:
            return _open_local(root, options)
        found = obstore_location(obj)
        if found is not None:
            url, from_object = found
            return _open_cloud(url, {**from_object, **options})
    if is_obspec_client(obj):
        refuse_unknown(options, keyword_names(ObspecClientStore, Store), f"obspec client {obj!r}")
        return from_obspec(obj, **options)
    raise TypeError(
        "expected a URL, a path, an asyncshard Store, an obstore store or an obspec client, "
        f"not {type(obj).__name__}"
    )


def refuse_malformed_scheme(url: str) -> None:
    """``s3:/bucket`` or ``s3:bucket`` is a mistyped URL, not a local path named so."""
    scheme, colon, rest = url.partition(":")
    if colon and scheme.lower() in _OPENERS:
        raise UnknownSchemeError(
            f"{url!r} is not a URL: write {scheme}://{rest.lstrip('/')} "
            f"(a local path with a colon: ./{url})"
        )


def _open_local(path: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.local import LocalStore

    accepted = keyword_names(LocalStore, Store) - {"root"}
    refuse_unknown(options, accepted, f"the local folder {path!r} (a cloud store needs a URL)")
    return LocalStore(path, **options)


def _open_file_url(url: str, options: dict[str, Any]) -> Store:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        # file://relative/path: keep the host part as the first path segment
        return _open_local(unquote(parts.netloc + parts.path), options)
    return _open_local(unquote(parts.path), options)


def _open_memory(url: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.memory import MemoryStore

    refuse_unknown(options, keyword_names(Store), url)
    return MemoryStore(**options)


def _open_cloud(url: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.cloud import CloudStore

    return CloudStore(url, **options)


register_scheme("file", _open_file_url)
register_scheme("memory", _open_memory)
for _scheme in CLOUD_SCHEMES:
    register_scheme(_scheme, _open_cloud)
