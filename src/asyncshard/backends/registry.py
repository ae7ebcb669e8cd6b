"""Open a Store from a URL: ``open_store("s3://bucket/prefix")``, ``open_store("/data")``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.errors import UnknownSchemeError
from asyncshard.store import Store

Opener = Callable[[str, dict[str, Any]], Store]
_OPENERS: dict[str, Opener] = {}


def register_scheme(scheme: str, opener: Opener) -> None:
    """Make ``open_store`` open ``scheme://...`` URLs with ``opener(url, options)``."""
    _OPENERS[scheme.lower()] = opener


def supported_schemes() -> list[str]:
    """The URL schemes ``open_store`` knows."""
    return sorted(_OPENERS)


def open_store(url: Any, **options: Any) -> Store:
    """Open the store a URL names; a plain path is a local folder; an obspec client
    (``get_async``, ``head_async``, ...) becomes a Store over it (``from_obspec``)."""
    if not isinstance(url, str):
        from asyncshard.obspec import from_obspec, is_obspec_client

        if is_obspec_client(url):
            return from_obspec(url, **options)
        raise TypeError(f"open_store takes a URL, a path or an obspec client, not {url!r}")
    scheme, sep, _ = url.partition("://")
    if not sep:
        _refuse_malformed_scheme(url)
        return _open_local(url, options)
    opener = _OPENERS.get(scheme.lower())
    if opener is None:
        raise UnknownSchemeError(
            f"unsupported URL scheme {scheme!r} in {url!r}; supported: "
            + ", ".join(f"{s}://" for s in supported_schemes())
            + " and plain paths"
        )
    return opener(url, options)


def _refuse_malformed_scheme(url: str) -> None:
    """``s3:/bucket`` or ``s3:bucket`` is a mistyped URL, not a local path named so."""
    scheme, colon, rest = url.partition(":")
    if colon and scheme.lower() in _OPENERS:
        raise UnknownSchemeError(
            f"{url!r} is not a URL: write {scheme}://{rest.lstrip('/')} "
            f"(a local path with a colon: ./{url})"
        )


def _open_local(path: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.local import LocalStore

    return LocalStore(path, **options)


def _open_file_url(url: str, options: dict[str, Any]) -> Store:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        # file://relative/path: keep the host part as the first path segment
        return _open_local(unquote(parts.netloc + parts.path), options)
    return _open_local(unquote(parts.path), options)


def _open_memory(url: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.memory import MemoryStore

    return MemoryStore(**options)


def _open_cloud(url: str, options: dict[str, Any]) -> Store:
    from asyncshard.backends.cloud import CloudStore

    return CloudStore(url, **options)


register_scheme("file", _open_file_url)
register_scheme("memory", _open_memory)
for _scheme in CLOUD_SCHEMES:
    register_scheme(_scheme, _open_cloud)
