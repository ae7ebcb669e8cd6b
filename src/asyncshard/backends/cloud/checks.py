"""Checks of option values before they reach obstore: a malformed one is a
:class:`~asyncshard.errors.StoreConfigError` naming the option and the value.

obstore takes some values as they are and fails on them only when a request is built, by
a panic of its Rust core (an endpoint without a scheme, a credential with a line break);
others it refuses when the store is built, without saying which option was wrong. Every
value that obstore parses from a string is checked here first:

- addresses (endpoints, base URLs, proxies): ``http(s)://host[:port][/path]`` in printable
  ASCII, without spaces;
- names that become part of a host name (region, Azure account): letters, digits, ``.``,
  ``-``, ``_``;
- booleans: ``True``/``False`` or obstore's spellings (``true``, ``1``, ``yes``, ``on``,
  ``y`` and their opposites, in any case);
- durations given as numbers: finite seconds, not negative;
- every other string: no control characters (they end up in HTTP headers).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from asyncshard.errors import StoreConfigError

__all__ = [
    "check_backend_options",
    "check_client_options",
    "check_endpoint",
    "check_own_options",
    "seconds",
    "shown",
]

#: Options (obstore's names without their ``aws_``, ``google_``, ``azure_`` prefixes)
#: that are URLs.
URL_OPTIONS = frozenset(
    {
        "endpoint",
        "endpoint_url",
        "endpoint_url_s3",
        "metadata_endpoint",
        "sts_endpoint",
        "container_credentials_full_uri",
        "base_url",
        "gcs_base_url",
        "authority_host",
        "msi_endpoint",
        "identity_endpoint",
        "fabric_token_service_url",
        "proxy_url",
    }
)
#: Options that become part of a host name.
NAME_OPTIONS = frozenset({"region", "default_region", "account_name", "account"})
#: Options that obstore parses as booleans.
BOOL_OPTIONS = frozenset(
    {
        "skip_signature",
        "virtual_hosted_style_request",
        "unsigned_payload",
        "disable_tagging",
        "disable_bulk_delete",
        "sse_bucket_key_enabled",
        "request_payer",
        "s3_express",
        "imdsv1_fallback",
        "use_emulator",
        "use_fabric_endpoint",
        "use_azure_cli",
        "allow_http",
        "allow_invalid_certificates",
        "randomize_addresses",
        "http1_only",
        "http2_only",
        "http2_keep_alive_while_idle",
    }
)
#: Options whose text may span lines (a service account's JSON key, a PEM certificate).
MULTILINE_OPTIONS = frozenset({"service_account_key", "proxy_ca_certificate"})
#: obstore's spellings of booleans (object_store parses them case-insensitively).
BOOL_WORDS = frozenset({"true", "false", "1", "0", "yes", "no", "on", "off", "y", "n"})

_NAME = re.compile(r"[A-Za-z0-9._-]+")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_PRINTABLE = re.compile(r"[!-~]+")  # ASCII from '!' to '~': no space, no control
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PREFIXES = ("aws_", "google_", "azure_storage_", "azure_")


#: Parts of option names whose values are secrets: errors do not repeat them.
_SECRET = re.compile(r"secret|token|password|sas|account_key|service_account_key|customer_key")


def shown(name: str, value: Any) -> str:
    """``name=value`` for an error message (a secret's value hidden)."""
    return f"{name}=<hidden>" if _SECRET.search(name.lower()) else f"{name}={value!r}"


def _bad(name: str, value: Any, why: str) -> StoreConfigError:
    return StoreConfigError(f"option {shown(name, value)}: {why}")


def base_name(name: str) -> str:
    """``name`` as obstore reads it: lower case, without its backend prefix."""
    lower = name.lower()
    for prefix in _PREFIXES:
        if lower.startswith(prefix):
            return lower[len(prefix) :]
    return lower


def url_problem(value: str) -> str | None:
    """Why ``value`` is not an ``http(s)://host[:port][/path]`` address (``None``: it is)."""
    if not value:
        return "empty: an address is http(s)://host[:port], e.g. http://127.0.0.1:9000"
    if not _PRINTABLE.fullmatch(value):
        return "an address is printable ASCII without spaces, e.g. http://127.0.0.1:9000"
    try:
        parts = urlsplit(value)
        port = parts.port  # a port out of range or not a number raises
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"an address starts with http:// or https://, e.g. http://{value.split('/')[0]}"
    host = parts.hostname or ""
    if parts.netloc.rpartition("@")[2].startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address"
    elif not _HOST.fullmatch(host):
        return "no valid host name (letters, digits, '.', '-')"
    if port == 0:
        return "port 0 is not a port"
    return None


def check_endpoint(name: str, value: Any) -> None:
    """``StoreConfigError`` unless ``value`` is an ``http(s)://`` address."""
    if not isinstance(value, str):
        raise _bad(name, value, f"an address is a string, not {type(value).__name__}")
    problem = url_problem(value)
    if problem is not None:
        raise _bad(name, value, problem)


def _check_value(name: str, value: Any, label: str | None = None) -> None:
    """Check ``value`` by what option ``name`` is; errors name it ``label`` (or ``name``)."""
    base = base_name(name)
    name = label or name
    if value is None:
        return  # not given
    if base in URL_OPTIONS:
        check_endpoint(name, value)
    elif not isinstance(value, str):
        return  # obstore refuses values of the wrong type when the store is built
    elif base in NAME_OPTIONS and not _NAME.fullmatch(value):
        raise _bad(name, value, "a name of letters, digits, '.', '-', '_'")
    elif base in BOOL_OPTIONS and value.lower() not in BOOL_WORDS:
        raise _bad(name, value, "not a boolean (true/false, 1/0, yes/no, on/off)")
    elif base not in MULTILINE_OPTIONS and _CONTROL.search(value):
        raise _bad(name, value, "control characters (line breaks...) are not allowed")


def check_backend_options(cfg: Mapping[str, Any]) -> None:
    """Check the backend configuration (``endpoint``, ``region``, credentials...)."""
    for name, value in cfg.items():
        _check_value(str(name), value)


def check_client_options(client: Mapping[str, Any]) -> None:
    """Check obstore client options (``client_options``: timeouts, proxy, headers...)."""
    for name, value in client.items():
        if name == "default_headers" and isinstance(value, Mapping):
            for header, text in value.items():
                _check_value("default_header", text, f"default_headers[{header!r}]")
        else:
            _check_value(str(name), value)


def seconds(name: str, value: float) -> timedelta:
    """A duration given as a number of seconds; finite and not negative."""
    if isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise _bad(name, value, "a duration is a finite number of seconds >= 0 or a string")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise _bad(name, value, "too long a duration") from None


def duration(name: str, value: float) -> float:
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise _bad(name, value, "a positive number of seconds")
    return float(value)


#: The store's own options that are flags, and those that are whole numbers.
OWN_FLAGS = ("allow_http", "conditional_writes", "listing", "forbidden_is_missing")
OWN_COUNTS = (
    "max_gap",
    "max_request",
    "max_concurrency",
    "multipart_threshold",
    "max_bytes_in_flight",
)


def check_own_options(given: Mapping[str, Any]) -> None:
    """Check the store's own options: flags are ``True``/``False``, counts whole numbers,
    ``max_overfetch`` a number (a string ``"false"`` would otherwise read as true)."""
    for name in OWN_FLAGS:
        if given.get(name) is not None and not isinstance(given[name], bool):
            raise _bad(name, given[name], "True or False")
    for name in OWN_COUNTS:
        value = given.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _bad(name, value, "a whole number")
    overfetch = given.get("max_overfetch")
    if overfetch is not None and (
        isinstance(overfetch, bool) or not isinstance(overfetch, int | float)
    ):
        raise _bad("max_overfetch", overfetch, "a number (or None)")
