"""CloudStore: one obstore-backed Store for ``s3://``, ``gs://``, ``http(s)://``, ``az://``.

``open_store("s3://bucket/prefix", **options)`` lands here. Credentials and endpoints
follow obstore's conventions (``AWS_*``, ``GOOGLE_*``, ``AZURE_*`` environment
variables) and can be passed as options; see docs/cloud.md for the full list.

Behaviour worth knowing:

* **Versions** are the object's ETag; when the backend also reports an object version
  (GCS generation, S3 version id) it is appended as ``<etag>#<version>``. Conditional
  reads send ``If-Match: <etag>``; conditional writes send ``If-None-Match: *`` /
  ``If-Match`` (S3, Azure) or ``x-goog-if-generation-match`` (GCS).
* **Ranges** clamp like Python slicing on every backend. A zero-length range, and a
  range the server answers with 416 (it starts at or past the end; on some servers a
  suffix longer than the object), are settled by a ``HEAD`` (plus one bounded ``GET``
  if the clamped range is not empty). A server that answers a range request with a
  full ``200`` (it ignores ``Range``) is read whole once more and sliced. These extra
  requests are counted. Every answer's length is checked against its range.
* **Errors**: a bad URL (no bucket or host, a malformed bucket name) or bad options →
  ``StoreConfigError`` (a ``ValueError``) when the store is opened, before any request;
  missing → ``None``; precondition failed → ``ConflictError``; 401/403 →
  ``StorePermissionError`` naming the bucket and the credential source (on
  ``http(s)://`` a 403 reads as missing, like Neuroglancer); connection failures,
  timeouts, truncated bodies and 5xx after retries → ``StoreConnectionError``.
* **Retries**: obstore's (exponential backoff with jitter) cover 5xx, connection errors
  and timeouts, and it resumes a body that breaks off. A read whose body still fails
  after that (seen in the fault tests, about once in a few thousand reads at a 10 % fault
  rate) is started again here, up to ``max_retries`` times, each restart counted as a
  ``get`` in ``stats`` (obstore's own retries are not counted). So a body that keeps
  breaking off costs at most ``(1 + max_retries)**2`` requests before the error.
* **Plain HTTP** is allowed when the URL or the configured endpoint is ``http://`` (the
  user wrote it) or ``allow_http=True`` is passed.
* ``http(s)://`` stores are read-only and cannot list unless ``listing=True`` (WebDAV
  ``PROPFIND``, as obstore implements it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

import obstore
from obstore import exceptions as obs_errors
from obstore.store import AzureStore, GCSStore, HTTPStore, S3Store

from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    ReadOnlyError,
    StoreBackendError,
    StoreConfigError,
    StoreConnectionError,
    StorePermissionError,
    UnsupportedOperationError,
)
from asyncshard.ranges import ByteRange, Offset, Range, Suffix, resolve
from asyncshard.store import DEFAULT_MAX_CONCURRENCY, BytesLike, GetResult, ObjectMeta, Store

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

SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "http": "http",
    "https": "http",
    "az": "az",
    "azure": "az",
    "abfs": "az",
    "abfss": "az",
    "adl": "az",
}

#: Characters of S3 and GCS bucket names (both also forbid some sequences; the server says).
_BUCKET = re.compile(r"[A-Za-z0-9._-]+")
_STATUS = re.compile(r"status(?: code)?:? (\d{3})\b")
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
#: What obstore raises: its own errors, FileNotFoundError and other OSErrors.
_OBSTORE_ERRORS = (obs_errors.BaseError, OSError)
_CONNECTION_HINTS = (
    "error sending request",
    "connection",
    "timed out",
    "timeout",
    "error decoding response",
    "body",
    "broken pipe",
    "reset by peer",
    "incomplete",
    "unexpected eof",
)


def open_cloud_store(url: str, options: Mapping[str, Any]) -> CloudStore:
    """Open ``url`` (``s3://``, ``gs://``, ``http(s)://``, ``az://``) with ``options``."""
    return CloudStore(url, **options)


def _duration(value: float | str | timedelta) -> str | timedelta:
    """Seconds (a number), an obstore duration string or a ``timedelta``."""
    if isinstance(value, (int, float)):
        return timedelta(seconds=value)
    return value


def _encode_version(e_tag: str | None, version: str | None) -> str | None:
    if version is None:
        return e_tag
    return f"{e_tag or ''}#{version}"


def _decode_version(value: str) -> tuple[str | None, str | None]:
    """``(e_tag, version)`` of a version string made by :func:`_encode_version`."""
    e_tag, sep, version = value.rpartition("#")
    if not sep or '"' in version:
        return value, None
    return e_tag or None, version or None


class _BodyCutShort(StoreConnectionError):
    """The response started but its body broke off (after obstore's own resumptions)."""


class CloudStore(Store):
    """A Store over an object store reached through obstore.

    ``url`` names the backend, bucket and prefix. Options besides the ones below are
    obstore configuration for the backend (``endpoint``, ``region``, ``access_key_id``,
    ``secret_access_key``, ``session_token``, ``skip_signature``, ``service_account``,
    ``service_account_key``, ``bearer_token``, ``account_name``, ...).

    Args:
        url: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``http(s)://host/path``
            or ``az://container/prefix``.
        max_gap, max_request, max_concurrency: range coalescing caps and request
            concurrency (defaults :data:`CLOUD_MAX_GAP`, :data:`CLOUD_MAX_REQUEST`).
        allow_http: allow plain ``http://`` endpoints; by default allowed exactly when
            the URL or the configured endpoint/base URL is ``http://``.
        max_retries: retries per request (default 5); ``retry_config`` for the rest.
        timeout, connect_timeout: seconds or obstore duration strings.
        conditional_writes: set ``False`` for S3-compatible servers that ignore
            ``If-Match``/``If-None-Match`` (e.g. ``rclone serve s3``); conditional
            writes then raise ``UnsupportedOperationError`` instead of silently
            overwriting.
        listing: for ``http(s)://`` only, ``True`` lists through WebDAV ``PROPFIND``.
        forbidden_is_missing: read a 403 answer as "missing" (default for ``http(s)://``
            only: public buckets and static servers answer 403 for absent keys and
            folders, as Neuroglancer assumes); 401 stays a permission error.
        client_options, retry_config, credential_provider: passed to obstore (merged
            over asyncshard's defaults).
        multipart_threshold: unconditional writes larger than this use multipart upload.
    """

    def __init__(
        self,
        url: str,
        *,
        max_gap: int = CLOUD_MAX_GAP,
        max_request: int = CLOUD_MAX_REQUEST,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        allow_http: bool | None = None,
        max_retries: int | None = None,
        timeout: float | str | timedelta | None = None,
        connect_timeout: float | str | timedelta | None = None,
        conditional_writes: bool = True,
        listing: bool | None = None,
        forbidden_is_missing: bool | None = None,
        client_options: Mapping[str, Any] | None = None,
        retry_config: Mapping[str, Any] | None = None,
        credential_provider: Any = None,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        config: Mapping[str, Any] | None = None,
        **backend_config: Any,
    ) -> None:
        try:
            super().__init__(
                max_gap=max_gap, max_request=max_request, max_concurrency=max_concurrency
            )
            parts = urlsplit(url)
        except ValueError as exc:  # bad caps; a malformed URL (``http://[::1``)
            raise StoreConfigError(f"{url!r}: {exc}") from exc
        kind = SCHEMES.get(parts.scheme.lower())
        if kind is None:
            raise StoreConfigError(f"CloudStore cannot open {url!r}: unsupported scheme")
        self._url = url
        self.kind = kind
        self.bucket = parts.netloc
        self.prefix = unquote(parts.path).strip("/")
        self.multipart_threshold = multipart_threshold
        self._conditional = conditional_writes
        self._forbidden_is_missing = (
            forbidden_is_missing if forbidden_is_missing is not None else kind == "http"
        )
        self._listing = listing if listing is not None else kind != "http"
        _check_bucket(url, kind, self.bucket)
        cfg: dict[str, Any] = {**(config or {}), **backend_config}
        if kind == "http" and cfg:
            raise StoreConfigError(
                f"unknown options for {url!r}: {sorted(cfg)} (http(s) stores take only "
                "client_options, retry_config and the asyncshard options)"
            )

        client: dict[str, Any] = {**DEFAULT_CLIENT, **(client_options or {})}
        if timeout is not None:
            client["timeout"] = _duration(timeout)
        if connect_timeout is not None:
            client["connect_timeout"] = _duration(connect_timeout)
        if allow_http is not None:
            client["allow_http"] = allow_http
        elif "allow_http" not in client:
            client["allow_http"] = self._endpoint(cfg).startswith("http://")
        retry: dict[str, Any] = {**DEFAULT_RETRY, **(retry_config or {})}
        if max_retries is not None:
            retry["max_retries"] = max_retries
        self._read_retries = int(retry["max_retries"])
        self.credential_source = _credential_source(kind, cfg, credential_provider, client)

        common: dict[str, Any] = {"client_options": client, "retry_config": retry}
        if credential_provider is not None:
            common["credential_provider"] = credential_provider
        prefix = self.prefix or None
        typed_cfg: Any = cfg  # obstore's TypedDicts; obstore validates the keys itself
        try:
            if kind == "s3":
                self._os: Any = S3Store(self.bucket, prefix=prefix, config=typed_cfg, **common)
            elif kind == "gs":
                self._os = GCSStore(self.bucket, prefix=prefix, config=typed_cfg, **common)
            elif kind == "az":
                self._os = AzureStore.from_url(url, config=typed_cfg, **common)
            else:
                self._os = HTTPStore.from_url(url.rstrip("/"), **common)
        except (obs_errors.BaseError, ValueError, TypeError) as exc:
            # unknown option, a value of the wrong type, unreadable credentials, bad host...
            raise StoreConfigError(
                f"{url}: cannot configure the store: {_first_line(exc)}"
            ) from exc

    def __repr__(self) -> str:
        return f"CloudStore({self.url!r})"

    @property
    def url(self) -> str:
        """The URL this store was opened from."""
        return self._url

    def _endpoint(self, cfg: Mapping[str, Any]) -> str:
        """The configured endpoint or base URL, to decide whether plain HTTP is intended."""
        if self.kind == "http":
            return self.url
        if self.kind == "s3":
            for key in (
                "aws_endpoint_url_s3",
                "endpoint",
                "aws_endpoint",
                "endpoint_url",
                "aws_endpoint_url",
            ):
                if cfg.get(key):
                    return str(cfg[key])
            for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
                if os.environ.get(var):
                    return os.environ[var]
        if self.kind == "gs":
            if cfg.get("base_url"):
                return str(cfg["base_url"])
            sa_key = cfg.get("service_account_key") or os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY")
            if sa_key:
                try:
                    return str(json.loads(sa_key).get("gcs_base_url", ""))
                except (ValueError, AttributeError):
                    return ""
            return os.environ.get("GOOGLE_BASE_URL", "")
        if self.kind == "az":
            return str(cfg.get("endpoint") or os.environ.get("AZURE_STORAGE_ENDPOINT", ""))
        return ""

    # -- capabilities -------------------------------------------------------------------

    @property
    def supports_writes(self) -> bool:
        return self.kind != "http"

    @property
    def supports_listing(self) -> bool:
        return self._listing

    @property
    def supports_conditional_writes(self) -> bool:
        return self.supports_writes and self._conditional

    # -- error mapping ------------------------------------------------------------------

    def _where(self, key: str | None) -> str:
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def _map_error(self, exc: Exception, key: str | None, action: str) -> AsyncShardError:
        """The asyncshard error for an obstore failure."""
        kind = _classify(exc)
        where = self._where(key)
        detail = _first_line(exc)
        if kind == "conflict":
            return ConflictError(f"{where}: condition failed on {action}: {detail}", key=key)
        if kind == "permission":
            what = {"s3": "bucket", "gs": "bucket", "az": "container"}.get(self.kind, "host")
            return StorePermissionError(
                f"{where}: access denied on {action} ({what} {self.bucket!r}, credentials "
                f"from {self.credential_source}): {detail}"
            )
        if kind in ("connection", "unsatisfiable", "not-partial"):
            return StoreConnectionError(f"{where}: {action} failed: {detail}")
        if kind == "missing":
            return StoreBackendError(f"{where}: not found on {action}: {detail}")
        if kind == "unsupported":
            return UnsupportedOperationError(f"{where}: {action} not supported: {detail}")
        return StoreBackendError(f"{where}: {action} failed: {detail}")

    def _reads_as_missing(self, exc: BaseException) -> bool:
        """A 403 on a read counts as "missing" where ``forbidden_is_missing`` says so."""
        return self._forbidden_is_missing and _status(exc) == 403

    # -- reads --------------------------------------------------------------------------

    def _meta(self, key: str, meta: Mapping[str, Any]) -> ObjectMeta:
        return ObjectMeta(
            key=key,
            size=int(meta["size"]),
            version=_encode_version(meta.get("e_tag"), meta.get("version")),
            last_modified=meta.get("last_modified"),
        )

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        for attempt in itertools.count():
            try:
                return await self._read(key, byte_range, if_match, after_head=False)
            except _BodyCutShort as exc:  # the body broke off even after obstore's retries
                if attempt >= self._read_retries:
                    raise StoreConnectionError(str(exc)) from exc.__cause__
                self.stats.requests["get"] += 1
                await asyncio.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        raise AssertionError("unreachable")

    async def _read(
        self, key: str, byte_range: ByteRange | None, if_match: str | None, *, after_head: bool
    ) -> GetResult | None:
        if (isinstance(byte_range, Range) and byte_range.end == byte_range.start) or (
            isinstance(byte_range, Suffix) and byte_range.length == 0
        ):
            # Nothing to transfer: one HEAD answers "missing", "conflict" or b"".
            self.stats.requests["get"] -= 1
            self.stats.requests["head"] += 1
            return await self._head_then_read(key, byte_range, if_match)
        options: dict[str, Any] = {}
        if if_match is not None:
            options["if_match"] = _decode_version(if_match)[0] or if_match
        if isinstance(byte_range, Range):
            options["range"] = (byte_range.start, byte_range.end)
        elif isinstance(byte_range, Offset) and byte_range.offset > 0:
            options["range"] = {"offset": byte_range.offset}
        elif isinstance(byte_range, Suffix):
            options["range"] = {"suffix": byte_range.length}
        try:
            result = await obstore.get_async(self._os, key, options=options)  # type: ignore[arg-type]
        except FileNotFoundError:
            return None
        except _OBSTORE_ERRORS as exc:
            if self._reads_as_missing(exc):
                return None
            kind = _classify(exc)
            if kind == "unsatisfiable" and not after_head:
                # 416: the range starts at or after the end (or, on some servers, is a
                # suffix longer than the object): look at the size, then read or not.
                self.stats.requests["head"] += 1
                return await self._head_then_read(key, byte_range, if_match)
            if kind == "not-partial":  # the server ignored Range: read whole and slice
                self.stats.requests["get"] += 1
                return await self._whole_and_slice(key, byte_range, options)
            raise self._map_error(exc, key, "read") from exc
        buf = await self._body(result, key)
        start, end = result.range
        return self._result(key, buf, end - start, result.meta, if_match)

    async def _body(self, result: Any, key: str) -> memoryview:
        """The body of a started response; a transfer that breaks off is ``_BodyCutShort``."""
        try:
            return memoryview(await result.bytes_async())
        except _OBSTORE_ERRORS as exc:
            error = self._map_error(exc, key, "read")
            if isinstance(error, StoreConnectionError):  # _get starts the read again
                raise _BodyCutShort(str(error)) from exc
            raise error from exc

    def _result(
        self,
        key: str,
        data: memoryview,
        expected: int,
        meta: Mapping[str, Any],
        if_match: str | None,
    ) -> GetResult:
        """Check what a GET returned (length, and ETag for servers that ignore If-Match)."""
        if len(data) != expected:
            raise StoreConnectionError(
                f"{self._where(key)}: short read: got {len(data)} bytes of {expected}"
            )
        result = GetResult(data, self._meta(key, meta))
        self._check_version(key, result.meta, if_match)
        return result

    def _check_version(self, key: str, meta: ObjectMeta, if_match: str | None) -> None:
        if if_match is None or meta.version is None:
            return
        if _decode_version(if_match)[0] != _decode_version(meta.version)[0]:
            raise ConflictError(f"{self._where(key)}: not at version {if_match}", key=key)

    async def _whole_and_slice(
        self, key: str, byte_range: ByteRange | None, options: dict[str, Any]
    ) -> GetResult | None:
        options = {k: v for k, v in options.items() if k != "range"}
        try:
            result = await obstore.get_async(self._os, key, options=options)  # type: ignore[arg-type]
        except FileNotFoundError:
            return None
        except _OBSTORE_ERRORS as exc:
            if self._reads_as_missing(exc):
                return None
            raise self._map_error(exc, key, "read") from exc
        whole = self._result(
            key,
            await self._body(result, key),
            result.meta["size"],
            result.meta,
            options.get("if_match"),
        )
        start, end = resolve(byte_range, len(whole.data))
        return GetResult(whole.data[start:end], whole.meta)

    async def _head_then_read(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """HEAD, then b"" if the clamped range is empty, else one bounded GET."""
        meta = await self._head(key)
        if meta is None:
            return None
        self._check_version(key, meta, if_match)
        start, end = resolve(byte_range, meta.size)
        if start == end:
            return GetResult(b"", meta)
        self.stats.requests["get"] += 1
        whole = (start, end) == (0, meta.size)
        return await self._read(
            key, None if whole else Range(start, end), if_match, after_head=True
        )

    async def _head(self, key: str) -> ObjectMeta | None:
        try:
            meta = await obstore.head_async(self._os, key)
        except FileNotFoundError:
            return None
        except _OBSTORE_ERRORS as exc:
            if self._reads_as_missing(exc):
                return None
            raise self._map_error(exc, key, "head") from exc
        return self._meta(key, meta)

    # -- writes -------------------------------------------------------------------------

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only: plain HTTP has no writes")
        conditional = if_absent or if_match is not None
        if conditional and not self._conditional:
            raise UnsupportedOperationError(
                f"{self!r} was opened with conditional_writes=False: its server ignores "
                "If-Match/If-None-Match, so a conditional write would silently overwrite"
            )
        if if_absent and if_match is not None:
            raise ConflictError(
                f"{self._where(key)}: if_absent and if_match exclude each other", key=key
            )
        mode: Any = "overwrite"
        if if_absent:
            mode = "create"
        elif if_match is not None:
            e_tag, version = _decode_version(if_match)
            mode = {k: v for k, v in (("e_tag", e_tag), ("version", version)) if v is not None}
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        try:
            result = await obstore.put_async(
                self._os,
                key,
                view,
                mode=mode,
                use_multipart=not conditional and len(view) > self.multipart_threshold,
            )
        except FileNotFoundError as exc:  # update of a missing object (some servers: 404)
            if if_match is None:
                raise self._map_error(exc, key, "write") from exc
            raise ConflictError(f"{self._where(key)}: object does not exist", key=key) from exc
        except _OBSTORE_ERRORS as exc:
            raise self._map_error(exc, key, "write") from exc
        return _encode_version(result.get("e_tag"), result.get("version"))

    async def _delete(self, key: str) -> None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only: plain HTTP has no writes")
        try:
            await obstore.delete_async(self._os, key)
        except FileNotFoundError:
            pass
        except _OBSTORE_ERRORS as exc:
            raise self._map_error(exc, key, "delete") from exc

    # -- listing ------------------------------------------------------------------------

    def _no_listing(self) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"{self!r} cannot list: plain HTTP has no listing (open it with listing=True "
            "if the server speaks WebDAV PROPFIND)"
        )

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        if not self._listing:
            raise self._no_listing()
        # obstore lists whole path segments; asyncshard prefixes are plain strings, so
        # list the enclosing folder and filter.
        folder = prefix.rpartition("/")[0]
        try:
            async for batch in obstore.list(self._os, folder or None, chunk_size=1000):
                for meta in batch:
                    key = self._key_of(meta["path"])
                    if key is not None and key.startswith(prefix):
                        yield key
        except _OBSTORE_ERRORS as exc:
            raise self._map_error(exc, prefix or None, "list") from exc

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        if not self._listing:
            raise self._no_listing()
        try:
            result = await obstore.list_with_delimiter_async(self._os, prefix[:-1] or None)
        except FileNotFoundError:
            return [], []
        except _OBSTORE_ERRORS as exc:
            raise self._map_error(exc, prefix or None, "list") from exc
        keys = {self._key_of(meta["path"]) for meta in result["objects"]}
        prefixes = {self._key_of(p.rstrip("/")) for p in result["common_prefixes"]}
        return (
            sorted(k for k in keys if k and k.startswith(prefix)),
            sorted(
                p + "/"
                for p in prefixes
                if p and (p + "/").startswith(prefix) and p + "/" != prefix
            ),
        )

    def _key_of(self, path: str) -> str | None:
        """The store key of a listed path (obstore's WebDAV listing starts at the host)."""
        if self.kind != "http" or not self.prefix:
            return path
        base = self.prefix + "/"
        return path[len(base) :] if path.startswith(base) else None


# -- helpers -----------------------------------------------------------------------------


def _check_bucket(url: str, kind: str, bucket: str) -> None:
    """Refuse a URL without a bucket (container, host) or with a malformed bucket name."""
    what = {"s3": "bucket", "gs": "bucket", "az": "container"}.get(kind, "host")
    if not bucket:
        scheme = url.partition("://")[0].lower()
        raise StoreConfigError(f"{url!r} has no {what}: write {scheme}://{what}/prefix")
    if kind in ("s3", "gs") and not _BUCKET.fullmatch(bucket):
        raise StoreConfigError(
            f"{url!r}: {bucket!r} is not a valid bucket name (letters, digits, '.', '-', '_')"
        )


def _first_line(exc: BaseException) -> str:
    """obstore messages carry a long debug dump after the first line; keep the start."""
    text = str(exc).strip().split("\n\nDebug source:")[0]
    text = " ".join(text.split())
    return text if len(text) <= 400 else text[:400] + "..."


def _status(exc: BaseException) -> int | None:
    """The HTTP status an obstore error reports, if any."""
    match = _STATUS.search(str(exc))
    return int(match.group(1)) if match else None


def _classify(exc: BaseException) -> str:
    """Sort an obstore failure into the few cases asyncshard distinguishes."""
    if isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(
        exc,
        (obs_errors.PreconditionError, obs_errors.NotModifiedError, obs_errors.AlreadyExistsError),
    ):
        return "conflict"
    if isinstance(exc, (obs_errors.PermissionDeniedError, obs_errors.UnauthenticatedError)):
        return "permission"
    text = str(exc)
    if "non-partial response" in text or "Range request not supported" in text:
        return "not-partial"
    if isinstance(exc, obs_errors.NotSupportedError):
        return "unsupported"
    status = _status(exc)
    if status is not None:
        if status in (401, 403):
            return "permission"
        if status == 404:
            return "missing"
        if status in (304, 409, 412):
            return "conflict"
        if status == 416:
            return "unsatisfiable"
        if status >= 500 or status in (408, 429):
            return "connection"
    kind = _KIND.search(text)
    if kind and kind.group(1) in ("Connect", "Timeout", "Request", "Interrupted", "Decode"):
        return "connection"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "connection"
    lowered = text.lower()
    if any(hint in lowered for hint in _CONNECTION_HINTS):
        return "connection"
    return "other"


def _credential_source(
    kind: str, cfg: Mapping[str, Any], provider: Any, client: Mapping[str, Any]
) -> str:
    """Where the credentials of a store come from, for permission errors."""
    env = os.environ
    if provider is not None:
        return f"the credential_provider option ({type(provider).__name__})"
    if kind == "s3":
        if cfg.get("skip_signature"):
            return "nowhere: skip_signature=True sends anonymous requests"
        if cfg.get("access_key_id") or cfg.get("aws_access_key_id"):
            return "the access_key_id/secret_access_key options"
        if env.get("AWS_ACCESS_KEY_ID"):
            return "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables"
        if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
            return "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)"
        if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI"
        ):
            return "the ECS/EKS container credentials endpoint"
        return "the EC2 instance metadata service (no AWS credentials were configured)"
    if kind == "gs":
        if cfg.get("skip_signature"):
            return "nowhere: skip_signature=True sends anonymous requests"
        for opt in (
            "bearer_token",
            "service_account_key",
            "service_account",
            "application_credentials",
        ):
            if cfg.get(opt):
                return f"the {opt} option"
        for var in (
            "GOOGLE_BEARER_TOKEN",
            "GOOGLE_SERVICE_ACCOUNT_KEY",
            "GOOGLE_SERVICE_ACCOUNT",
            "GOOGLE_SERVICE_ACCOUNT_PATH",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ):
            if env.get(var):
                return f"the {var} environment variable"
        return "application default credentials (gcloud or the metadata server)"
    if kind == "az":
        for opt in (
            "access_key",
            "account_key",
            "sas_key",
            "bearer_token",
            "client_secret",
            "use_azure_cli",
            "skip_signature",
            "use_emulator",
        ):
            if cfg.get(opt):
                return f"the {opt} option"
        for var in (
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_KEY",
            "AZURE_CLIENT_SECRET",
            "AZURE_STORAGE_TOKEN",
        ):
            if env.get(var):
                return f"the {var} environment variable"
        return "managed identity or the Azure CLI (no Azure credentials were configured)"
    if client.get("default_headers"):
        return "the default_headers client option"
    return "nowhere: plain HTTP requests carry no credentials"
