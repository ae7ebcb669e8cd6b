"""obstore store objects given where a URL is expected: the URL and options they stand for.

``open_store(S3Store("bucket", prefix="p", endpoint=...))`` opens the
:class:`~asyncshard.backends.cloud.CloudStore` of ``s3://bucket/p`` with the object's
configuration, client options, retry configuration and credential provider, so that the
store behaves (errors, retries, conditional writes, counters) as if opened from the URL.
"""

from __future__ import annotations

import os
from typing import Any

from obstore.store import AzureStore, GCSStore, HTTPStore, LocalStore, MemoryStore, S3Store

__all__ = ["is_obstore_store", "local_root", "obstore_location"]

_STORES = (S3Store, GCSStore, AzureStore, HTTPStore, LocalStore, MemoryStore)


def is_obstore_store(obj: object) -> bool:
    """Whether ``obj`` is one of obstore's store classes."""
    return isinstance(obj, _STORES)


def local_root(obj: object) -> str | None:
    """The folder of an obstore ``LocalStore`` (``None`` for other objects)."""
    if isinstance(obj, LocalStore) and obj.prefix is not None:
        return os.fspath(obj.prefix)
    return None


def obstore_location(obj: object) -> tuple[str, dict[str, Any]] | None:
    """``(url, CloudStore options)`` of an S3, GCS, Azure or HTTP obstore store, else ``None``."""
    if isinstance(obj, HTTPStore):
        return obj.url, _shared(obj)
    if isinstance(obj, (S3Store, GCSStore)):
        config = _config(obj)
        scheme = "s3" if isinstance(obj, S3Store) else "gs"
        url = f"{scheme}://{config.pop('bucket')}/{obj.prefix or ''}"
        return url, {**_shared(obj), "config": config}
    if isinstance(obj, AzureStore):
        config = _config(obj)
        url = f"az://{config.pop('container_name')}/{obj.prefix or ''}"
        return url, {**_shared(obj), "config": config}
    return None


def _config(obj: S3Store | GCSStore | AzureStore) -> dict[str, Any]:
    """The object's configuration; obstore reports booleans as ``"true"``/``"false"``."""
    flags = {"true": True, "false": False}
    return {k: flags.get(v, v) if isinstance(v, str) else v for k, v in obj.config.items()}


def _shared(obj: Any) -> dict[str, Any]:
    """The client options, retry configuration and credential provider that were set
    (an HTTP store has no credential provider)."""
    names = ("client_options", "retry_config", "credential_provider")
    return {n: v for n in names if (v := getattr(obj, n, None)) is not None}
