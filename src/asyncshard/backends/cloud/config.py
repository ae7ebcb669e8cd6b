"""Configuration of cloud stores: URL parsing, obstore options, credential sources.

Everything here runs when a store is opened, before any request; a bad URL or option is a
:class:`~asyncshard.errors.StoreConfigError` (a ``ValueError``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from obstore import exceptions as obs_errors
from obstore.store import AzureStore, GCSStore, HTTPStore, S3Store

from asyncshard.backends.cloud.checks import check_client_options, seconds, shown, url_problem
from asyncshard.backends.schemes import CLOUD_SCHEMES
from asyncshard.errors import StoreConfigError, UnknownOptionError
from asyncshard.suggest import did_you_mean

#: Default coalescing caps for cloud stores; docs/cloud.md records the measurement.
CLOUD_MAX_GAP = 256 * 1024
CLOUD_MAX_REQUEST = 4 * 1024 * 1024
#: Objects larger than this are uploaded in parts (only unconditional writes).
MULTIPART_THRESHOLD = 64 * 1024 * 1024

#: Retries: 5 retries, 50 ms doubling to at most 2 s (with jitter), 60 s in total.
DEFAULT_RETRY: dict[str, Any] = {
    "max_retries": 5,
    "backoff": {
        "init_backoff": timedelta(milliseconds=50),
        "max_backoff": timedelta(seconds=2),
        "base": 2,
    },
    "retry_timeout": timedelta(seconds=60),
}
#: Timeouts: 5 s to connect, 120 s for a whole request including its body.
DEFAULT_CLIENT: dict[str, Any] = {"connect_timeout": "5s", "timeout": "120s"}

#: Characters of S3 and GCS bucket names (both also forbid some sequences; the server says).
_BUCKET = re.compile(r"[A-Za-z0-9._-]+")
#: obstore's S3 config keys (and aliases) that name the endpoint.
_S3_ENDPOINT_KEYS = (
    "aws_endpoint_url_s3",
    "endpoint",
    "aws_endpoint",
    "endpoint_url",
    "aws_endpoint_url",
)
#: What a backend calls the first part of its URLs.
_CONTAINER = {"s3": "bucket", "gs": "bucket", "az": "container"}


def container_word(kind: str) -> str:
    """``bucket``, ``container`` or ``host``: the first part of a ``kind`` URL."""
    return _CONTAINER.get(kind, "host")


@dataclass(frozen=True, slots=True)
class Target:
    """What a cloud URL names: the backend, the bucket (container, host) and the prefix."""

    url: str
    kind: str  # "s3", "gs", "http" or "az"
    bucket: str
    prefix: str


def parse_url(url: str) -> Target:
    """Parse and check a cloud URL (scheme from :data:`CLOUD_SCHEMES`, a valid bucket)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a malformed URL (``http://[::1``)
        raise StoreConfigError(f"{url!r}: {exc}") from exc
    kind = CLOUD_SCHEMES.get(parts.scheme.lower())
    if kind is None:
        raise StoreConfigError(f"CloudStore cannot open {url!r}: unsupported scheme")
    target = Target(url, kind, parts.netloc, unquote(parts.path).strip("/"))
    what = container_word(kind)
    if not target.bucket:
        scheme = url.partition("://")[0].lower()
        raise StoreConfigError(f"{url!r} has no {what}: write {scheme}://{what}/prefix")
    if kind in ("s3", "gs") and not _BUCKET.fullmatch(target.bucket):
        raise StoreConfigError(
            f"{url!r}: {target.bucket!r} is not a valid bucket name "
            "(letters, digits, '.', '-', '_')"
        )
    if kind == "http":
        problem = url_problem(f"{parts.scheme}://{parts.netloc}")
        if problem is not None:
            raise StoreConfigError(f"{url!r}: {problem}")
    return target


def duration(name: str, value: float | str | timedelta) -> str | timedelta:
    """Seconds (a number), an obstore duration string or a ``timedelta`` (option ``name``)."""
    if isinstance(value, (int, float)):
        return seconds(name, value)
    return value


def client_options(
    target: Target,
    cfg: Mapping[str, Any],
    options: Mapping[str, Any] | None,
    *,
    timeout: float | str | timedelta | None,
    connect_timeout: float | str | timedelta | None,
    allow_http: bool | None,
) -> dict[str, Any]:
    """obstore ``ClientConfig``: asyncshard's defaults, the user's options, the shortcuts.

    Plain HTTP is allowed exactly when the user wrote an ``http://`` address (the URL or
    the configured endpoint), unless ``allow_http`` says otherwise.
    """
    client: dict[str, Any] = {**DEFAULT_CLIENT, **(options or {})}
    if timeout is not None:
        client["timeout"] = duration("timeout", timeout)
    if connect_timeout is not None:
        client["connect_timeout"] = duration("connect_timeout", connect_timeout)
    if allow_http is not None:
        client["allow_http"] = allow_http
    check_client_options(client)
    if "allow_http" not in client:
        client["allow_http"] = endpoint_of(target, cfg).lower().startswith("http://")
    return client


def retry_options(options: Mapping[str, Any] | None, max_retries: int | None) -> dict[str, Any]:
    """obstore ``RetryConfig``: asyncshard's defaults with the user's options over them
    (obstore ignores keys it does not know; they are refused here), plus
    ``asyncshard_retries``, the store's own retry count, for the store to take out."""
    unknown = sorted(set(options or {}) - set(DEFAULT_RETRY))
    backoff = (options or {}).get("backoff")
    if isinstance(backoff, Mapping):
        unknown += [f"backoff.{k}" for k in sorted(set(backoff) - set(DEFAULT_RETRY["backoff"]))]
    if unknown:
        raise UnknownOptionError(
            f"unknown retry_config option(s) {unknown}; obstore takes "
            f"{sorted(DEFAULT_RETRY)} and backoff's {sorted(DEFAULT_RETRY['backoff'])}",
            unknown,
        )
    retry: dict[str, Any] = {**DEFAULT_RETRY, **(options or {})}
    if max_retries is not None:
        retry["max_retries"] = max_retries
    if not isinstance(retry["max_retries"], int) or retry["max_retries"] < 0:
        raise StoreConfigError(f"max_retries must be an int >= 0, not {retry['max_retries']!r}")
    # the store retries itself (backends/cloud/calls.py), so that the request window sees
    # every throttling answer; obstore retries too only when its max_retries is given
    retry["asyncshard_retries"] = retry["max_retries"]
    if "max_retries" not in (options or {}):
        retry["max_retries"] = 0
    return retry


def endpoint_of(target: Target, cfg: Mapping[str, Any]) -> str:
    """The configured endpoint or base URL, to decide whether plain HTTP is intended."""
    env = os.environ
    if target.kind == "http":
        return target.url
    if target.kind == "s3":
        for key in _S3_ENDPOINT_KEYS:
            if cfg.get(key):
                return str(cfg[key])
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
            if env.get(var):
                return env[var]
        return ""
    if target.kind == "gs":
        if cfg.get("base_url"):
            return str(cfg["base_url"])
        return _gcs_key_base_url(cfg) or env.get("GOOGLE_BASE_URL", "")
    return str(cfg.get("endpoint") or env.get("AZURE_STORAGE_ENDPOINT", ""))


#: obstore's GCS options, then environment variables, naming a service-account key: as
#: JSON, or as the path of a JSON file.
_GCS_KEY_OPTIONS = ("service_account_key", "google_service_account_key")
_GCS_KEY_VARIABLES = ("GOOGLE_SERVICE_ACCOUNT_KEY",)
_GCS_KEY_FILE_OPTIONS = ("service_account", "google_service_account", "service_account_path")
_GCS_KEY_FILE_VARIABLES = ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH")


def _first_value(cfg: Mapping[str, Any], options: Sequence[str], variables: Sequence[str]) -> str:
    """The first of ``options`` set in ``cfg``, else of ``variables`` in the environment."""
    found = next((cfg[n] for n in options if cfg.get(n)), None)
    return str(found or next((os.environ[v] for v in variables if os.environ.get(v)), ""))


def _gcs_key_base_url(cfg: Mapping[str, Any]) -> str:
    """The ``gcs_base_url`` of the service-account key obstore will use (given as JSON
    or as a file), where its JSON names one (an emulator's address), else ``""``."""
    text = _first_value(cfg, _GCS_KEY_OPTIONS, _GCS_KEY_VARIABLES)
    path = "" if text else _first_value(cfg, _GCS_KEY_FILE_OPTIONS, _GCS_KEY_FILE_VARIABLES)
    try:
        if path:
            text = Path(path).read_text(encoding="utf-8")
        return str(json.loads(text).get("gcs_base_url") or "")
    except (OSError, ValueError, AttributeError):
        return ""  # obstore says what is wrong with the key


def build_obstore(
    target: Target,
    cfg: Mapping[str, Any],
    client: Mapping[str, Any],
    retry: Mapping[str, Any],
    credential_provider: Any,
    own: Collection[str] = (),
) -> Any:
    """The obstore store for ``target``; a refused option is a ``StoreConfigError`` (naming
    the nearest of obstore's and ``own`` option names when it is misspelt)."""
    if target.kind == "http" and cfg:
        raise UnknownOptionError(
            f"unknown options for {target.url!r}: {sorted(cfg)} (http(s) stores take only "
            "client_options, retry_config and the asyncshard options)",
            sorted(cfg),
        )
    try:
        return _build(target, cfg, client, retry, credential_provider)
    except _REFUSALS as exc:
        # unknown option, a value of the wrong type, unreadable credentials, bad host...
        detail = " ".join(str(exc).split("\n\nDebug source:")[0].split())
        refused = _refused_alone(target, cfg, client, retry)
        named = "".join(
            f"option {shown(name, value)}{did_you_mean(name, known_names(target.kind, own))}: "
            for name, value in refused
        )
        message = f"{target.url}: cannot configure the store: {named}{detail}"
        if isinstance(exc, obs_errors.UnknownConfigurationKeyError):
            raise UnknownOptionError(message) from exc
        if isinstance(exc, ValueError) and detail.startswith("Invalid key"):
            raise UnknownOptionError(message + " (in client_options)") from exc
        raise StoreConfigError(message) from exc


_REFUSALS = (obs_errors.BaseError, ValueError, TypeError)

#: obstore's most used option names per backend, offered (with asyncshard's own) when a
#: misspelt one is refused; obstore itself checks every name it takes.
_BACKEND_NAMES = {
    "s3": (
        "endpoint",
        "region",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "skip_signature",
        "virtual_hosted_style_request",
        "conditional_put",
        "disable_bulk_delete",
        "checksum_algorithm",
        "request_payer",
        "unsigned_payload",
    ),
    "gs": ("service_account", "service_account_key", "bearer_token", "base_url", "skip_signature"),
    "az": (
        "account_name",
        "account_key",
        "sas_key",
        "bearer_token",
        "use_emulator",
        "endpoint",
        "client_id",
        "client_secret",
        "tenant_id",
        "skip_signature",
        "use_fabric_endpoint",
    ),
}


def known_names(kind: str, own: Collection[str] = ()) -> tuple[str, ...]:
    """Option names a ``kind`` store takes (``own``: the store's keywords), for
    suggestions (not a complete list)."""
    return (*own, *_BACKEND_NAMES.get(kind, ()))


def _build(
    target: Target,
    cfg: Mapping[str, Any],
    client: Mapping[str, Any],
    retry: Mapping[str, Any],
    credential_provider: Any,
) -> Any:
    common: dict[str, Any] = {"client_options": client, "retry_config": retry}
    if credential_provider is not None:
        common["credential_provider"] = credential_provider
    prefix = target.prefix or None
    typed_cfg: Any = cfg  # obstore's TypedDicts; obstore validates the keys itself
    if target.kind == "s3":
        return S3Store(target.bucket, prefix=prefix, config=typed_cfg, **common)
    if target.kind == "gs":
        return GCSStore(target.bucket, prefix=prefix, config=typed_cfg, **common)
    if target.kind == "az":
        return AzureStore.from_url(target.url, config=typed_cfg, **common)
    return HTTPStore.from_url(target.url.rstrip("/"), **common)


def _refused_alone(
    target: Target, cfg: Mapping[str, Any], client: Mapping[str, Any], retry: Mapping[str, Any]
) -> list[tuple[str, Any]]:
    """The options without which obstore builds the store (its errors do not name them)."""

    def builds(some_cfg: Mapping[str, Any], some_client: Mapping[str, Any]) -> bool:
        try:
            _build(target, some_cfg, some_client, retry, None)
        except _REFUSALS:
            return False
        return True

    def without(options: Mapping[str, Any], name: str) -> dict[str, Any]:
        return {k: v for k, v in options.items() if k != name}

    found = [(name, value) for name, value in cfg.items() if builds(without(cfg, name), client)]
    return found + [
        (name, value) for name, value in client.items() if builds(cfg, without(client, name))
    ]


def usable_credential_source(
    url: str, kind: str, cfg: Mapping[str, Any], provider: Any, client: Mapping[str, Any]
) -> str:
    """:func:`credential_source`, refused when it is the instance metadata service and
    ``AWS_EC2_METADATA_DISABLED`` forbids asking it."""
    source = credential_source(kind, cfg, provider, client)
    if source == EC2_METADATA and metadata_disabled():
        raise StoreConfigError(
            f"{url}: no AWS credentials are configured and AWS_EC2_METADATA_DISABLED "
            "forbids asking the instance metadata service: give access_key_id and "
            "secret_access_key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), a "
            "credential_provider, or skip_signature=True (--anon) for a public bucket"
        )
    return source


def window_key(target: Target, cfg: Mapping[str, Any]) -> tuple[str, str, str]:
    """What a request window is shared by: the backend, its endpoint (as configured,
    lower-cased, without trailing slashes; for plain HTTP the host) and the bucket."""
    if target.kind == "http":
        parts = urlsplit(target.url)
        return ("http", f"{parts.scheme}://{parts.netloc}".lower(), "")
    return (target.kind, endpoint_of(target, cfg).strip().lower().rstrip("/"), target.bucket)


def credential_source(
    kind: str, cfg: Mapping[str, Any], provider: Any, client: Mapping[str, Any]
) -> str:
    """Where the credentials of a store come from, for permission errors."""
    if provider is not None:
        return f"the credential_provider option ({type(provider).__name__})"
    if kind == "s3":
        return _s3_source(cfg)
    if kind == "gs":
        return _gcs_source(cfg)
    if kind == "az":
        return _azure_source(cfg)
    if client.get("default_headers"):
        return "the default_headers client option"
    return "nowhere: plain HTTP requests carry no credentials"


def _first_set(cfg: Mapping[str, Any], options: tuple[str, ...], variables: tuple[str, ...]) -> str:
    """``the X option`` or ``the X environment variable`` for the first one set, else ``""``."""
    for opt in options:
        if cfg.get(opt):
            return f"the {opt} option"
    for var in variables:
        if os.environ.get(var):
            return f"the {var} environment variable"
    return ""


def _s3_source(cfg: Mapping[str, Any]) -> str:
    env = os.environ
    if cfg.get("skip_signature"):
        return "nowhere: skip_signature=True sends anonymous requests"
    keys = _s3_keys(cfg)
    if keys:
        return keys
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)"
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    ):
        return "the ECS/EKS container credentials endpoint"
    return EC2_METADATA


#: The parts of static S3 credentials: obstore's option names, then the variable that
#: gives the part when no option does (each part is looked up on its own).
_S3_KEY_PARTS = (
    (("access_key_id", "aws_access_key_id"), "AWS_ACCESS_KEY_ID"),
    (("secret_access_key", "aws_secret_access_key"), "AWS_SECRET_ACCESS_KEY"),
    (("session_token", "aws_session_token", "token", "aws_token"), "AWS_SESSION_TOKEN"),
)


def _s3_keys(cfg: Mapping[str, Any]) -> str:
    """Where the static S3 credentials come from, part by part (an option wins over the
    environment for its part alone, so a wrong secret given as an option is named as
    one), or ``""`` when no access key id is set."""
    parts: list[tuple[str, str]] = []  # (name, "option" or "environment variable")
    for names, variable in _S3_KEY_PARTS:
        name = next((n for n in names if cfg.get(n)), None)
        if name is not None:
            parts.append((name, "option"))
        elif os.environ.get(variable):
            parts.append((variable, "environment variable"))
    if not parts or parts[0][0] not in (*_S3_KEY_PARTS[0][0], _S3_KEY_PARTS[0][1]):
        return ""
    kinds = {kind for _, kind in parts}
    if len(kinds) == 1:  # all options, or all variables
        return f"the {'/'.join(n for n, _ in parts)} {kinds.pop()}{'s' if len(parts) > 1 else ''}"
    return " with ".join(f"the {name} {kind}" for name, kind in parts)


#: Where S3 credentials come from when none are configured.
EC2_METADATA = "the EC2 instance metadata service (no AWS credentials were configured)"


def metadata_disabled() -> bool:
    """Whether ``AWS_EC2_METADATA_DISABLED`` is ``true`` (any case, as the AWS SDKs read it)."""
    return os.environ.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true"


def _gcs_source(cfg: Mapping[str, Any]) -> str:
    if cfg.get("skip_signature"):
        return "nowhere: skip_signature=True sends anonymous requests"
    found = _first_set(
        cfg,
        ("bearer_token", "service_account_key", "service_account", "application_credentials"),
        (
            "GOOGLE_BEARER_TOKEN",
            "GOOGLE_SERVICE_ACCOUNT_KEY",
            "GOOGLE_SERVICE_ACCOUNT",
            "GOOGLE_SERVICE_ACCOUNT_PATH",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ),
    )
    return found or "application default credentials (gcloud or the metadata server)"


def _azure_source(cfg: Mapping[str, Any]) -> str:
    found = _first_set(
        cfg,
        (
            "access_key",
            "account_key",
            "sas_key",
            "bearer_token",
            "client_secret",
            "use_azure_cli",
            "skip_signature",
            "use_emulator",
        ),
        (
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_KEY",
            "AZURE_CLIENT_SECRET",
            "AZURE_STORAGE_TOKEN",
        ),
    )
    return found or "managed identity or the Azure CLI (no Azure credentials were configured)"
