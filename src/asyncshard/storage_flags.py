"""The storage flags every command takes: ``--endpoint``, ``--anon`` and ``-o KEY=VALUE``.

They become the storage options of the options contract (docs/cloud.md), so the shell
reaches exactly what the library reaches with the same options; obstore's environment
variables keep working underneath.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from asyncshard.backends.cloud.checks import url_problem
from asyncshard.backends.registry import keyword_names, refuse_malformed_scheme
from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.errors import (
    BucketNotFoundError,
    InvalidKeyError,
    OverlappingStoresError,
    ReadOnlyError,
    StoreConfigError,
    UnknownSchemeError,
    UnsupportedOperationError,
)

__all__ = [
    "EXIT_USAGE",
    "USAGE_ERRORS",
    "UsageFailure",
    "command_error",
    "pair_options",
    "storage_flags",
    "storage_options",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status of a usage error (click's): the command line asked for something wrong.
EXIT_USAGE = 2
#: Errors that are the command line's mistake, in every command: a malformed URL or an
#: unknown scheme, unknown or invalid storage options, a malformed key, a write to a
#: read-only store, what the store cannot do, a destination overlapping its source. A
#: missing bucket is not among them (a failure, exit status 1, as a missing folder).
USAGE_ERRORS: tuple[type[Exception], ...] = (
    StoreConfigError,
    UnknownSchemeError,
    InvalidKeyError,
    ReadOnlyError,
    UnsupportedOperationError,
    OverlappingStoresError,
)


class UsageFailure(click.ClickException):
    """A failure that is the command line's mistake: one line, exit status 2."""

    exit_code = EXIT_USAGE


def command_error(exc: Exception, usage: tuple[type[Exception], ...] = ()) -> click.ClickException:
    """The one-line error a command ends with for ``exc``: exit status 2 for a usage
    error (:data:`USAGE_ERRORS` and ``usage``), else 1.

    Args:
        exc: The error that ended the command.
        usage: More errors that are usage errors for this command.
    """
    mistake = isinstance(exc, USAGE_ERRORS + usage) and not isinstance(exc, BucketNotFoundError)
    kind = UsageFailure if mistake else click.ClickException
    return kind(f"{type(exc).__name__}: {exc}")


#: What ``--endpoint`` sets, per backend (obstore's names).
_ENDPOINT_KEY = {"s3": "endpoint", "az": "endpoint", "gs": "base_url"}


def storage_flags(func: F) -> F:
    """Add ``--endpoint``, ``--anon`` and ``-o/--option`` to a click command; the command
    receives them as ``endpoint``, ``anon`` and ``option``."""
    decorators = [
        click.option(
            "--endpoint",
            metavar="URL",
            help="Address of an S3-compatible server (MinIO, SeaweedFS...), GCS or Azure emulator.",
        ),
        click.option(
            "--anon",
            is_flag=True,
            help="Send unsigned requests (public buckets); no credentials are looked up.",
        ),
        click.option(
            "-o",
            "--option",
            "option",
            multiple=True,
            metavar="KEY=VALUE",
            help="A storage option (obstore's names: region, access_key_id, ...; or "
            "asyncshard's: max_retries, timeout, ...). Repeatable.",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def storage_options(
    url: str | None,
    endpoint: str | None,
    anon: bool,
    pairs: Sequence[str],
    *,
    endpoint_flag: str = "--endpoint",
) -> dict[str, Any]:
    """The storage options the flags give for ``url``; ``click.UsageError`` if they do not
    apply to it or the endpoint (given as ``endpoint_flag``) is no ``http(s)://`` address.
    Values of asyncshard's own options are JSON (``-o max_retries=3``,
    ``-o client_options={"timeout":"5s"}``); obstore's stay strings."""
    if url and "://" not in url:
        refuse_malformed_scheme(url)  # s3:/bucket is a typo, not a local path
    kind = CLOUD_SCHEMES.get(urlsplit(url).scheme.lower()) if url else None
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"-o takes KEY=VALUE, not {pair!r}")
        options[key] = _value(key, value)
    if endpoint is not None:
        if kind not in _ENDPOINT_KEY:
            raise click.UsageError(f"{endpoint_flag} applies to s3://, gs:// and az:// URLs")
        problem = url_problem(endpoint)
        if problem is not None:
            raise click.UsageError(f"{endpoint_flag} {endpoint!r}: {problem}")
        options[_ENDPOINT_KEY[kind]] = endpoint
    if anon:
        if kind is None:
            raise click.UsageError("--anon applies to cloud URLs (s3://, gs://, az://, http://)")
        if kind != "http":  # plain HTTP requests are unsigned already
            options["skip_signature"] = True
    return options


def _value(key: str, text: str) -> Any:
    """``text`` as JSON for asyncshard's own (typed) options, else as it is."""
    if key not in _typed_options():
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a duration string such as 5s, or a path


def _typed_options() -> frozenset[str]:
    from asyncshard.backends.cloud import CloudStore
    from asyncshard.backends.local import LocalStore

    return keyword_names(CloudStore, LocalStore) - {"url", "root", "config"}


def _is_cloud(url: str) -> bool:
    return "://" in url and urlsplit(url).scheme.lower() in CLOUD_SCHEMES


def pair_options(
    src: str,
    dst: str,
    flags: tuple[str | None, bool, Sequence[str]],
    to: tuple[str | None, Sequence[str]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The storage options of a command's source and destination (``cp``, ``shard --to``):
    the storage flags apply to each cloud URL of the two (``--anon`` to SRC only: writes
    are signed); ``--to-endpoint``/``--to-option`` replace them for DST.

    Args:
        src: The source URL or path.
        dst: The destination URL or path.
        flags: ``--endpoint``, ``--anon`` and the ``-o`` pairs.
        to: ``--to-endpoint`` and the ``--to-option`` pairs.
    """
    for url in (src, dst):
        if "://" not in url:
            refuse_malformed_scheme(url)  # s3:bucket is a typo, whatever flags follow
    endpoint, anon, pairs = flags
    if endpoint is not None and not (_is_cloud(src) or _is_cloud(dst)):
        raise click.UsageError("--endpoint applies to s3://, gs:// and az:// URLs")
    if anon and not _is_cloud(src):
        raise click.UsageError("--anon applies to a cloud SRC (s3://, gs://, az://, http://)")
    if pairs and not (_is_cloud(src) or _is_cloud(dst)):
        raise click.UsageError("-o applies to cloud URLs; --to-option to a local DST")
    src_options = storage_options(src, endpoint, anon, pairs) if _is_cloud(src) else {}
    if to[0] is not None or to[1]:
        dst_options = storage_options(dst, to[0], False, to[1], endpoint_flag="--to-endpoint")
    else:
        dst_options = storage_options(dst, endpoint, False, pairs) if _is_cloud(dst) else {}
    return src_options, dst_options
