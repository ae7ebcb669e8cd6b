"""CloudStore: the I/O of one obstore-backed Store (reads, writes, deletes, listing).

Configuration lives in :mod:`.config`, error mapping in :mod:`.errors`, the guard that
keeps obstore's threads out of a finalizing interpreter in :mod:`.inflight`, and the
resolution of conditional writes whose answer was lost in :mod:`.writes`. The behaviour
is described in the package docstring and in docs/cloud.md.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
    Set,
)
from datetime import timedelta
from typing import Any, TypeVar

import obstore

import asyncshard.backends.cloud.checks as checks
import asyncshard.backends.cloud.config as _config
import asyncshard.backends.cloud.listing as listing
import asyncshard.backends.cloud.mutations as mutations
import asyncshard.backends.cloud.streams as streams
import asyncshard.backends.cloud.writes as writes
from asyncshard.backends.cloud.calls import THROTTLE_TIMEOUT, backoff, call
from asyncshard.backends.cloud.errors import (
    OBSTORE_ERRORS,
    Failure,
    broke_off,
    classify,
    to_asyncshard,
)
from asyncshard.backends.cloud.inflight import InFlight
from asyncshard.backends.cloud.versions import decode_version, encode_version, same_etag
from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    ReadOnlyError,
    StoreConfigError,
    StoreConnectionError,
    UnsupportedOperationError,
)
from asyncshard.ranges import (
    MAX_OVERFETCH,
    ByteRange,
    Offset,
    Range,
    Suffix,
    bounded_span,
    resolve,
)
from asyncshard.store import (
    BytesLike,
    Data,
    GetResult,
    ObjectMeta,
    Store,
)
from asyncshard.walk import list_keys
from asyncshard.window import DEFAULT_MAX_BYTES, window_for

T = TypeVar("T")

#: Kinds whose unconditioned reads take one call (``_get_data``): those whose servers the
#: tests show answering a range open past the end. No Azure server runs in the tests.
ONE_CALL_KINDS = frozenset({"s3", "gs", "http"})
#: One-call read failures that another kind of read answers (see ``_get_data``).
_NOT_ONE_CALL = frozenset({Failure.NOT_PARTIAL, Failure.UNSATISFIABLE})


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
            or ``az://container/prefix`` (every scheme of ``CLOUD_SCHEMES``).
        max_gap: ranges of one object are merged into one request across gaps of at
            most this many bytes (see :class:`~asyncshard.store.Store`).
        max_request: merged requests are at most this many bytes.
        max_concurrency: requests in flight at most for this store object (default:
            none; the endpoint's adaptive window decides, see :mod:`asyncshard.window`).
        max_overfetch: a merged request reads at most this fraction of its wanted bytes
            again (or 4 KiB of gaps; on a round trip of 5 ms or more, the bytes one round
            trip delivers, at most ``max_gap``); ``None`` merges by the gap alone.
        allow_http: allow plain ``http://`` endpoints; by default allowed exactly when
            the URL or the configured endpoint/base URL is ``http://``.
        max_retries: retries of a request after a transient failure (default 5; the
            store retries, obstore's own retries are off unless ``retry_config`` sets
            its ``max_retries``); throttling answers are retried until
            ``throttle_timeout``. Also bounds the store's own restarts of broken reads
            and of conditional writes whose outcome was unknown.
        timeout: longest time for a whole request, its body included: seconds or an
            obstore duration string (``"500ms"``).
        connect_timeout: longest time to connect, in the same forms.
        conditional_writes: set ``False`` for S3-compatible servers that ignore
            ``If-Match``/``If-None-Match`` (e.g. ``rclone serve s3``); conditional
            writes then raise ``UnsupportedOperationError`` instead of silently
            overwriting.
        listing: for ``http(s)://`` only, ``True`` lists through WebDAV ``PROPFIND``.
        forbidden_is_missing: read a 403 answer as "missing" (default for ``http(s)://``
            only: public buckets and static servers answer 403 for absent keys and
            folders, as Neuroglancer assumes); 401 stays a permission error.
        client_options: obstore's ``ClientConfig``, merged over asyncshard's defaults.
        retry_config: obstore's ``RetryConfig``, merged over asyncshard's defaults.
        credential_provider: an obstore credential provider (e.g. a boto3 session
            wrapper), in place of the credentials in options and the environment.
        multipart_threshold: unconditional writes larger than this use multipart upload.
        max_bytes_in_flight: bytes the endpoint's requests hold at most (reserved up
            front: a write's length, a range's span, an estimate for a whole object);
            stores sharing an endpoint get the smallest bound any of them asked.
        throttle_timeout: seconds a request may keep being refused for the request rate
            (S3 ``SlowDown``/503, 429, ...) while the window slows down, before it fails
            with :class:`~asyncshard.errors.ThrottledError`.
        config: obstore configuration for the backend, as a mapping (merged under the
            keyword options).
        **backend_config: obstore configuration for the backend, as keywords.
    """

    def __init__(
        self,
        url: str,
        *,
        max_gap: int = _config.CLOUD_MAX_GAP,
        max_request: int = _config.CLOUD_MAX_REQUEST,
        max_concurrency: int | None = None,
        max_overfetch: float | None = MAX_OVERFETCH,
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
        multipart_threshold: int = _config.MULTIPART_THRESHOLD,
        max_bytes_in_flight: int = DEFAULT_MAX_BYTES,
        throttle_timeout: float = THROTTLE_TIMEOUT,
        config: Mapping[str, Any] | None = None,
        **backend_config: Any,
    ) -> None:
        given = {
            "max_gap": max_gap,
            "max_request": max_request,
            "max_concurrency": max_concurrency,
            "max_overfetch": max_overfetch,
            "allow_http": allow_http,
            "max_retries": max_retries,
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "conditional_writes": conditional_writes,
            "listing": listing,
            "forbidden_is_missing": forbidden_is_missing,
            "client_options": client_options,
            "retry_config": retry_config,
            "credential_provider": credential_provider,
            "multipart_threshold": multipart_threshold,
            "max_bytes_in_flight": max_bytes_in_flight,
            "throttle_timeout": throttle_timeout,
            "config": config,
            **backend_config,
        }
        checks.check_own_options(given)
        try:
            super().__init__(
                max_gap=max_gap,
                max_request=max_request,
                max_concurrency=max_concurrency,
                max_overfetch=max_overfetch,
            )
        except ValueError as exc:
            raise StoreConfigError(f"{url!r}: {exc}") from exc
        target = _config.parse_url(url)
        self._target = target
        # None means "not given" except for max_overfetch, where it lifts the bound
        self._open_options = {
            k: v for k, v in given.items() if v is not None or k == "max_overfetch"
        }
        self.kind = target.kind
        self.bucket = target.bucket
        self.prefix = target.prefix
        self.multipart_threshold = multipart_threshold
        self._conditional = conditional_writes
        self._forbidden_is_missing = (
            forbidden_is_missing if forbidden_is_missing is not None else self.kind == "http"
        )
        self._listing = listing if listing is not None else self.kind != "http"
        cfg: dict[str, Any] = {**(config or {}), **backend_config}
        checks.check_backend_options(cfg)
        client = _config.client_options(
            target,
            cfg,
            client_options,
            timeout=timeout,
            connect_timeout=connect_timeout,
            allow_http=allow_http,
        )
        retry = _config.retry_options(retry_config, max_retries)
        #: Retries after transient failures, restarts of broken reads and of writes with
        #: an unknown outcome (see :mod:`.calls`).
        self.retries = int(retry.pop("asyncshard_retries"))
        self.throttle_timeout = checks.duration("throttle_timeout", throttle_timeout)
        self.credential_source = _config.usable_credential_source(
            url, self.kind, cfg, credential_provider, client
        )
        self._os: Any = _config.build_obstore(
            target,
            cfg,
            client,
            retry,
            credential_provider,
            own=given.keys() - backend_config.keys(),
        )
        self._inflight = InFlight()
        #: The adaptive request window of the endpoint, shared in the process.
        self.window = window_for(_config.window_key(target, cfg))
        self.window.set_max_bytes(max_bytes_in_flight)
        #: Whether unconditioned reads go through obstore's ``get_range_async`` (one
        #: completion); cleared when the server answers a range with the whole object.
        self._one_call = self.kind in ONE_CALL_KINDS

    def __repr__(self) -> str:
        return f"CloudStore({self.url!r})"

    @property
    def url(self) -> str:
        """The URL the store was opened with."""
        return self._target.url

    @property
    def open_options(self) -> dict[str, Any]:
        """The options the store was opened with."""
        return dict(self._open_options)

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

    def version_pins_bytes(self, version: str) -> bool:
        return True  # an ETag (of the content, or unique per write) or a GCS generation

    @property
    def lists_in_pages(self) -> bool:
        return True

    # -- plumbing -----------------------------------------------------------------------

    async def _call(
        self, make: Callable[[], Awaitable[Any]], key: str | None = None, *, idempotent: bool = True
    ) -> Any:
        """Await one obstore call (``make()``), tracked so that :meth:`close` can wait
        for it, retried on throttling and transient failures (:mod:`.calls`)."""
        return await call(self, make, idempotent=idempotent, key=key)

    def _where(self, key: str | None) -> str:
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError:
        what = _config.container_word(self.kind)
        denied = f"{what} {self.bucket!r}, credentials from {self.credential_source}"
        return to_asyncshard(
            exc,
            failure,
            where=self._where(key),
            action=action,
            key=key,
            denied=denied,
            container=f"{what} {self.bucket!r}",
        )

    def _check_writable(self) -> None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only: plain HTTP has no writes")

    async def _close(self) -> None:
        """Wait for every request still in flight (see :mod:`.inflight`)."""
        await self._inflight.drain()

    # -- reads --------------------------------------------------------------------------

    def _meta(self, key: str, meta: Mapping[str, Any]) -> ObjectMeta:
        return ObjectMeta(
            key=key,
            size=int(meta["size"]),
            version=encode_version(meta.get("e_tag"), meta.get("version")),
            last_modified=meta.get("last_modified"),
        )

    def _missing(self, failure: Failure) -> bool:
        """Whether a read failure means "no such object" (a 403 where configured so)."""
        return failure is Failure.MISSING or (
            self._forbidden_is_missing and failure is Failure.FORBIDDEN
        )

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        return await self._restarting(
            lambda: self._read(key, byte_range, if_match, after_head=False)
        )

    async def _restarting(self, read: Callable[[], Awaitable[T]], kind: str = "get") -> T:
        """``read()``, started again (up to ``retries`` times, each restart counted as a
        request of ``kind``, its first) when its body breaks off.

        With its retries on, obstore resumes a body that breaks off, but a resumption can
        break off too, and it does not retry an answer whose body breaks off before the
        GET returns (a 404's error body); with them off (the default) the store restarts.
        """
        for attempt in itertools.count():
            try:
                return await read()
            except _BodyCutShort as exc:
                if attempt >= self.retries:
                    raise StoreConnectionError(str(exc)) from exc.__cause__
                self._count_request(kind)
                await asyncio.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    async def _get_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """The bytes alone, in one obstore call where the server answers ranges.

        ``get_async`` and then ``bytes_async`` hand two completions from obstore's
        threads to the event loop; ``get_range_async`` hands one, and a range open to
        the end (``TO_THE_END``) reads a whole object, as servers answer the part that
        exists. It gives no metadata, so it serves reads with no condition and no
        version wanted, and no ``Content-Range`` to check the body's length against
        (the HTTP client still checks it against ``Content-Length``). An empty object
        or a range past the end (416) is answered after a ``HEAD``, as in ``_get``; a
        server that answers a range with the whole object (200: ``rclone serve s3``,
        content served compressed) has it read whole and sliced, and, once that
        object is not empty, every later read of this store takes ``_get``'s path. A
        suffix and an empty range take that path too.
        """
        span = self._one_call_span(byte_range)
        if span is None:
            result = await self._get(key, byte_range, None)
            return None if result is None else result.data
        got = await self._restarting(lambda: self._read_span(key, span))
        if not isinstance(got, Failure):
            return got
        if got is Failure.UNSATISFIABLE:
            self._count_request("head")
            result = await self._restarting(
                lambda: self._head_then_read(key, byte_range, None), "head"
            )
        else:  # NOT_PARTIAL: the server sent the whole object
            self._count_request("get")
            result = await self._restarting(lambda: self._whole_and_slice(key, byte_range, {}))
            if result is not None and result.meta.size > 0:
                self._one_call = False
        return None if result is None else result.data

    async def _read_span(self, key: str, span: tuple[int, int]) -> Data | Failure | None:
        """One ``get_range_async``: the bytes, ``None`` if missing, or the failure
        (``_NOT_ONE_CALL``) another kind of read answers."""
        try:
            got = await self._call(
                lambda: obstore.get_range_async(self._os, key, start=span[0], end=span[1]), key
            )
            return memoryview(got)
        except OBSTORE_ERRORS as exc:
            return self._read_failed(exc, key, _NOT_ONE_CALL)

    def _one_call_span(self, byte_range: ByteRange | None) -> tuple[int, int] | None:
        """The ``(start, end)`` of a one-call read of ``byte_range``, or ``None``."""
        return bounded_span(byte_range) if self._one_call else None

    async def _read(
        self, key: str, byte_range: ByteRange | None, if_match: str | None, *, after_head: bool
    ) -> GetResult | None:
        if (isinstance(byte_range, Range) and byte_range.end == byte_range.start) or (
            isinstance(byte_range, Suffix) and byte_range.length == 0
        ):
            # Nothing to transfer: one HEAD instead of the GET answers "missing",
            # "conflict" or b"".
            self._count_request("get", -1)
            self._count_request("head")
            return await self._head_then_read(key, byte_range, if_match)
        options: dict[str, Any] = {}
        if if_match is not None:
            options["if_match"] = decode_version(if_match)[0] or if_match
        if isinstance(byte_range, Range):
            options["range"] = (byte_range.start, byte_range.end)
        elif isinstance(byte_range, Offset) and byte_range.offset > 0:
            options["range"] = {"offset": byte_range.offset}
        elif isinstance(byte_range, Suffix):
            options["range"] = {"suffix": byte_range.length}
        handled = (
            {Failure.NOT_PARTIAL} if after_head else {Failure.NOT_PARTIAL, Failure.UNSATISFIABLE}
        )
        result = await self._open_get(key, options, handled)
        if result is None:
            return None
        if result is Failure.UNSATISFIABLE:
            # 416: the range starts at or after the end (or, on some servers, is a
            # suffix longer than the object): look at the size, then read or not.
            self._count_request("head")
            return await self._head_then_read(key, byte_range, if_match)
        if result is Failure.NOT_PARTIAL:  # the server ignored Range: read whole
            self._count_request("get")
            return await self._whole_and_slice(key, byte_range, options)
        buf = await self._body(result, key)
        start, end = result.range
        return self._result(key, buf, end - start, result.meta, if_match)

    async def _open_get(self, key: str, options: dict[str, Any], handled: set[Failure]) -> Any:
        """Start a GET: obstore's result, ``None`` if missing, or a ``handled`` failure."""
        try:
            return await self._call(lambda: obstore.get_async(self._os, key, options=options), key)  # type: ignore[arg-type]
        except OBSTORE_ERRORS as exc:
            return self._read_failed(exc, key, handled)

    def _read_failed(self, exc: BaseException, key: str, handled: Set[Failure]) -> Failure | None:
        """What a failed GET means: ``None`` if the object is missing, the failure if it
        is ``handled``; else it raises, as ``_BodyCutShort`` if an answer (even a 404's
        error body) broke off, which obstore does not retry and ``_restarting`` does."""
        failure = classify(exc, key)
        if self._missing(failure):
            return None
        if failure in handled:
            return failure
        error = self._error(exc, failure, key, "read")
        if failure is Failure.CONNECTION and broke_off(exc):
            raise _BodyCutShort(str(error)) from exc
        raise error from exc

    async def _body(self, result: Any, key: str) -> memoryview:
        """The body of a started response; a transfer that breaks off is ``_BodyCutShort``."""
        try:
            return memoryview(await self._inflight.run(result.bytes_async()))
        except OBSTORE_ERRORS as exc:
            failure = classify(exc, key)
            if failure is Failure.CONNECTION:  # _get starts the read again
                raise _BodyCutShort(str(self._error(exc, failure, key, "read"))) from exc
            raise self._error(exc, failure, key, "read") from exc

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
        if not same_etag(if_match, meta.version):
            raise ConflictError(f"{self._where(key)}: not at version {if_match}", key=key)

    async def _whole_and_slice(
        self, key: str, byte_range: ByteRange | None, options: dict[str, Any]
    ) -> GetResult | None:
        options = {k: v for k, v in options.items() if k != "range"}
        result = await self._open_get(key, options, set())
        if result is None or isinstance(result, Failure):
            return None
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
        self._count_request("get")
        whole = (start, end) == (0, meta.size)
        return await self._read(
            key, None if whole else Range(start, end), if_match, after_head=True
        )

    async def _head(self, key: str) -> ObjectMeta | None:
        try:
            meta = await self._call(lambda: obstore.head_async(self._os, key), key)
        except OBSTORE_ERRORS as exc:
            failure = classify(exc, key)
            if self._missing(failure):
                return None
            raise self._error(exc, failure, key, "head") from exc
        return self._meta(key, meta)

    # -- writes -------------------------------------------------------------------------

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        self._check_writable()
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
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        if not conditional:
            return await writes.put_once(self, key, view, None, False)
        return await writes.put_conditional(self, key, view, if_match, if_absent)

    def stream_buffer(self, size: int, part_size: int) -> int:
        return streams.stream_buffer(size, part_size)

    async def _set_stream(self, key: str, parts: AsyncIterable[BytesLike]) -> str | None:
        """One multipart upload, fed part by part (see :mod:`.streams`)."""
        return await streams.put_stream(self, self._os, key, parts)

    async def _erase(self, key: str) -> None:
        self._check_writable()
        await mutations.delete(self, key)

    async def _erase_many(self, keys: Sequence[str]) -> None:
        """S3: one DeleteObjects request per 1,000 keys; elsewhere one DELETE per key."""
        await mutations.delete_many(self, keys, super()._erase_many)

    async def erase_prefix(self, prefix: str) -> None:
        """Delete every object whose key starts with ``prefix``, listed with
        :func:`~asyncshard.walk.list_keys`: a large folder by its subfolders, several
        listings at a time, instead of one page after another."""
        await self.erase_values(await list_keys(self, prefix))

    async def _copy(self, source: str, target: str) -> int | None:
        """S3 and GCS: a HEAD of the source, then a server-side copy
        (:func:`.mutations.copy`). Elsewhere the object is read and written."""
        return await mutations.copy(self, source, target, super()._copy)

    # -- listing ------------------------------------------------------------------------

    def _list(self, prefix: str) -> AsyncIterator[str]:
        return listing.list_keys(self, prefix)

    async def _list_objects(self, prefix: str) -> AsyncIterator[ObjectMeta]:
        async for key, meta in listing.list_entries(self, prefix):
            yield self._meta(key, meta)

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return await listing.list_dir(self, prefix)
