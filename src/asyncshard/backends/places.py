"""Where a store's objects live, to tell whether two stores overlap.

A :class:`Place` is what a store resolves to, not how it was written: the backend, the
server (the endpoint as the store applies it, option or environment variable, with the
scheme and host lower-cased, a default port and trailing slashes dropped), the bucket,
and the prefix as path segments (a local folder with its links resolved).
``--endpoint http://Host:80/`` and ``AWS_ENDPOINT_URL`` set to ``http://host`` name one
server. Host names are not looked up: ``localhost`` and ``127.0.0.1`` are two servers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.store import Store

__all__ = ["Place", "normalize_endpoint", "place_of"]

#: Ports a URL scheme implies.
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: obstore's Azure config keys (and the environment variable) naming the account.
_AZURE_ACCOUNT = ("azure_storage_account_name", "account_name")


@dataclass(frozen=True, slots=True)
class Place:
    """A store's objects: ``kind`` (``file``, ``s3``, ``gs``, ``http``, ``az``), the
    normalised ``server`` (``""``: the backend's default), the ``bucket`` and the
    ``prefix`` segments."""

    kind: str
    server: str
    bucket: str
    prefix: tuple[str, ...]

    def contains(self, other: Place) -> bool:
        """Whether every object of ``other`` is one of this place's (equal places too)."""
        return (self.kind, self.server, self.bucket) == (
            other.kind,
            other.server,
            other.bucket,
        ) and other.prefix[: len(self.prefix)] == self.prefix

    def overlaps(self, other: Place) -> bool:
        """Whether the two places are one, or one lies inside the other."""
        return self.contains(other) or other.contains(self)


def normalize_endpoint(url: str) -> str:
    """``url`` with its scheme and host lower-cased, a default port and trailing
    slashes dropped (``HTTP://Host:80/`` -> ``http://host``); ``""`` stays ``""``."""
    url = url.strip()
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL the store could use either: compared as written
        return url.rstrip("/")
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        netloc += f":{port}"
    path = "/".join(part for part in parts.path.split("/") if part)
    return f"{scheme}://{netloc}" + (f"/{path}" if path else "")


def place_of(store: Store) -> Place | None:
    """Where ``store`` keeps its objects, from the URL and options it reopens from
    (:attr:`Store.url`, :attr:`Store.open_options`); ``None`` if it has no URL or no
    place outside the process (memory)."""
    url = store.url
    if url is None:
        return None
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        return Place("file", "", "", _segments(os.path.realpath(unquote(urlsplit(url).path))))
    if scheme not in CLOUD_SCHEMES:
        return None
    return _cloud_place(url, store.open_options)


def _cloud_place(url: str, options: Mapping[str, Any]) -> Place:
    from asyncshard.backends.cloud import CloudStore
    from asyncshard.backends.cloud.config import endpoint_of, parse_url
    from asyncshard.backends.registry import keyword_names

    target = parse_url(url)
    # the obstore configuration, as CloudStore builds it: ``config`` and the options
    # it does not name itself (obstore matches the keys without regard to case)
    own = keyword_names(CloudStore, Store)
    cfg = {
        str(k).lower(): v
        for k, v in {
            **(options.get("config") or {}),
            **{k: v for k, v in options.items() if k not in own},
        }.items()
    }
    prefix = _segments(target.prefix)
    if target.kind == "http":  # the server is the URL's
        parts = urlsplit(url)
        return Place("http", normalize_endpoint(f"{parts.scheme}://{parts.netloc}"), "", prefix)
    server = normalize_endpoint(endpoint_of(target, cfg))
    if target.kind == "az" and not server:  # the account's default endpoint
        account = next((str(cfg[k]) for k in _AZURE_ACCOUNT if cfg.get(k)), None)
        server = f"azure:{account or os.environ.get('AZURE_STORAGE_ACCOUNT_NAME', '')}"
    return Place(target.kind, server, target.bucket, prefix)


def _segments(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)
