"""What an obstore failure means for asyncshard.

obstore raises typed exceptions for every case ``object_store`` has a variant for:
``FileNotFoundError`` (404), ``PreconditionError`` (412, and a 404 on a conditional
update), ``NotModifiedError`` (304), ``AlreadyExistsError`` (a create-only write of an
existing object; 409), ``PermissionDeniedError`` (403), ``UnauthenticatedError`` (401),
``NotSupportedError``. Those are sorted by type alone, but for one: the HTTP backend
reports a range answered with the whole object (``200``) as a ``NotSupportedError``
("Range request not supported"), which is the same failure as S3's "non-partial
response" and is sorted with it by its message.

Everything else arrives as ``GenericError`` (or a bare ``OSError``) with no structure a
caller can read: statuses ``object_store`` has no variant for (416, 5xx and 429),
transport failures (connection refused or reset, timeouts, a body cut short)
and its own check that a ranged request got a ``206``. For those, and only those, the
message is read: the HTTP status it reports, the ``HttpError`` kind of its debug dump,
a few phrases. This fallback lives in :func:`_untyped` so it is easy to drop piece by
piece as obstore grows types.
"""

from __future__ import annotations

import enum
import re

from obstore import exceptions as obs_errors

from asyncshard.errors import (
    AsyncShardError,
    BucketNotFoundError,
    ConflictError,
    StoreAuthenticationError,
    StoreBackendError,
    StoreConfigError,
    StoreConnectionError,
    StorePermissionError,
    ThrottledError,
    UnsupportedOperationError,
)

#: What obstore raises: its own errors, ``FileNotFoundError`` and other ``OSError``\ s.
OBSTORE_ERRORS = (obs_errors.BaseError, OSError)
#: The attribute a throttling error gets when the store gave up on it:
#: ``(throttle_timeout, requests per second the window had reached)``.
GAVE_UP = "asyncshard_gave_up"


class Failure(enum.Enum):
    """The few cases asyncshard tells apart."""

    MISSING = "missing"
    NO_BUCKET = "no-bucket"  # the bucket or container itself does not exist
    CONFLICT = "conflict"
    PERMISSION = "permission"  # the credentials were refused (a 401, or a 403 saying so)
    FORBIDDEN = "forbidden"  # another 403 (reads as missing on HTTP stores)
    CONNECTION = "connection"  # retrying later may help; a write's outcome is unknown
    THROTTLED = "throttled"  # refused for the request rate (503, 429, SlowDown...): not done
    UNSATISFIABLE = "unsatisfiable"  # 416: the range starts at or past the end
    NOT_PARTIAL = "not-partial"  # the server answered a range with the whole object
    UNSUPPORTED = "unsupported"
    NO_CREDENTIALS = "no-credentials"  # none configured, and the metadata service gave none
    PLAIN_HTTP = "plain-http"  # a plain http:// request refused because allow_http is off
    OTHER = "other"


_TYPED: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Failure], ...] = (
    ((FileNotFoundError, obs_errors.NotFoundError), Failure.MISSING),
    (
        (obs_errors.PreconditionError, obs_errors.NotModifiedError, obs_errors.AlreadyExistsError),
        Failure.CONFLICT,
    ),
    (obs_errors.PermissionDeniedError, Failure.FORBIDDEN),
    (obs_errors.UnauthenticatedError, Failure.PERMISSION),
    (obs_errors.NotSupportedError, Failure.UNSUPPORTED),
)

_STATUS = re.compile(r"status(?: code)?:? (\d{3})\b")
_HTTP_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
#: ``HttpError`` kinds of transport failures (object_store's ``HttpErrorKind``).
_TRANSPORT_KINDS = frozenset({"Connect", "Timeout", "Request", "Interrupted", "Decode"})
_TRANSPORT_PHRASES = (
    "error sending request",
    "connection",
    "timed out",
    "timeout",
    "error decoding response",
    "body error",
    "broken pipe",
    "reset by peer",
    "incomplete",
    "unexpected eof",
)
_NOT_PARTIAL_PHRASES = ("non-partial response", "Range request not supported")
#: Statuses in untyped errors (obstore types most of these; a few paths do not).
_BY_STATUS = {
    304: Failure.CONFLICT,
    401: Failure.PERMISSION,
    403: Failure.FORBIDDEN,
    404: Failure.MISSING,
    408: Failure.CONNECTION,
    409: Failure.CONFLICT,
    412: Failure.CONFLICT,
    416: Failure.UNSATISFIABLE,
    429: Failure.THROTTLED,
    503: Failure.THROTTLED,
}
#: Error codes of answers that refuse a request for its rate: S3 (``SlowDown``, also in
#: a 503), GCS (``rateLimitExceeded``, ``SlowDown`` in its XML API), Azure
#: (``ServerBusy``), and the AWS-wide ones.
_THROTTLE_CODES = re.compile(
    r"<Code>(?:SlowDown|TooManyRequests|RequestLimitExceeded|Throttling|ThrottlingException"
    r"|ServerBusy)</Code>|rateLimitExceeded|userRateLimitExceeded|ServerBusy"
)


#: The error codes servers answer a missing bucket or container with (S3 and GCS's XML
#: API in the body of a 404, Azure). A key that spells one is left out of the message
#: first (``classify``'s ``key``). A HEAD has no body: a HEAD of a key in a missing
#: bucket reads as a missing key.
_NO_BUCKET = re.compile(r"<Code>NoSuchBucket</Code>|ContainerNotFound")
#: The error codes of a 403 that refuses the credentials themselves, not the access (S3,
#: Azure): an unknown key, a wrong secret, an expired or invalid session token.
_BAD_CREDENTIALS = re.compile(
    r"<Code>(?:InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken"
    r"|TokenRefreshRequired|AuthenticationFailed)</Code>"
)


#: A request for the credentials of an EC2 instance role (IMDSv2's token, IMDSv1's
#: credentials): the only credentials left when none are configured.
_METADATA_REQUEST = re.compile(r"https?://\S+/latest/(?:api/token|meta-data/)")
#: reqwest refusing to build a request to a plain ``http://`` address (``https_only``).
_PLAIN_HTTP = re.compile(r"(?:GET|PUT|POST|HEAD|DELETE) http://\S+ .*builder error")


def classify(exc: BaseException, key: str | None = None) -> Failure:
    """Sort an obstore failure: a range answered whole by its message, then by its type
    where obstore gives one, else :func:`_untyped`. ``key``: the path asked, left out
    of the message where it spells a code itself."""
    text = str(exc)
    if key and (_NO_BUCKET.search(key) or _BAD_CREDENTIALS.search(key)):
        text = text.replace(key, "")
    if _NO_BUCKET.search(text):
        return Failure.NO_BUCKET
    if _METADATA_REQUEST.search(first_line(exc)):  # not retried: no credentials to retry
        return Failure.NO_CREDENTIALS
    if _PLAIN_HTTP.search(first_line(exc)):
        return Failure.PLAIN_HTTP
    if any(phrase in first_line(exc) for phrase in _NOT_PARTIAL_PHRASES):  # typed or not
        return Failure.NOT_PARTIAL
    failure = next((f for types, f in _TYPED if isinstance(exc, types)), None) or _untyped(exc)
    if failure is Failure.FORBIDDEN and _BAD_CREDENTIALS.search(text):
        return Failure.PERMISSION
    return failure


def _untyped(exc: BaseException) -> Failure:
    """The fallback for ``GenericError`` and bare ``OSError``: read status and message."""
    text = str(exc)
    match = _STATUS.search(text)
    status = int(match.group(1)) if match else None
    if status is not None and _THROTTLE_CODES.search(text):
        return Failure.THROTTLED
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status is not None and status >= 500:
        return Failure.CONNECTION
    kind = _HTTP_KIND.search(text)
    if kind is not None and kind.group(1) in _TRANSPORT_KINDS:
        return Failure.CONNECTION
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return Failure.CONNECTION
    lowered = text.lower()
    if status is None and any(phrase in lowered for phrase in _TRANSPORT_PHRASES):
        return Failure.CONNECTION
    return Failure.OTHER


def broke_off(exc: BaseException) -> bool:
    """Whether a transport failure happened while a body was being read."""
    return "body error" in first_line(exc)


def first_line(exc: BaseException) -> str:
    """obstore messages carry a long debug dump after the first line; keep the start."""
    text = " ".join(str(exc).strip().split("\n\nDebug source:")[0].split())
    return text if len(text) <= 400 else text[:400] + "..."


def to_asyncshard(
    exc: BaseException,
    failure: Failure,
    *,
    where: str,
    action: str,
    key: str | None,
    denied: str,
    container: str = "bucket",
) -> AsyncShardError:
    """The asyncshard error for an obstore failure already sorted into ``failure``.

    ``where`` names the object, ``action`` what was tried, ``denied`` what a permission
    error should add (bucket and credential source), ``container`` the bucket by name.
    """
    detail = first_line(exc)
    gave_up = getattr(exc, GAVE_UP, None)
    if failure is Failure.THROTTLED and gave_up is not None:
        timeout, rate = gave_up
        return ThrottledError(
            f"{where}: {action} still throttled after {timeout:g} s (throttle_timeout), "
            f"at {rate:.1f} requests/s: {detail}",
            rate=rate,
        )
    if failure is Failure.NO_CREDENTIALS:
        return StoreAuthenticationError(
            f"{where}: no credentials: none are configured and the instance metadata "
            "service gave none (not on a cloud instance with a role?): set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the access_key_id and "
            "secret_access_key options (-o), or skip_signature=True (--anon) for a "
            "public bucket"
        )
    if failure is Failure.PLAIN_HTTP:
        return StoreConfigError(
            f"{where}: {action} refused: it goes to a plain http:// address and "
            "allow_http is off; give allow_http=True (-o allow_http=true) to allow it"
        )
    if failure is Failure.CONFLICT:
        return ConflictError(f"{where}: condition failed on {action}: {detail}", key=key)
    if failure is Failure.PERMISSION:
        return StoreAuthenticationError(
            f"{where}: credentials refused on {action} ({denied}): {detail}"
        )
    if failure is Failure.FORBIDDEN:
        return StorePermissionError(f"{where}: access denied on {action} ({denied}): {detail}")
    if failure in (
        Failure.CONNECTION,
        Failure.THROTTLED,
        Failure.UNSATISFIABLE,
        Failure.NOT_PARTIAL,
    ):
        return StoreConnectionError(f"{where}: {action} failed: {detail}")
    if failure is Failure.NO_BUCKET:
        return BucketNotFoundError(f"{where}: {container} does not exist")
    if failure is Failure.MISSING:
        return StoreBackendError(f"{where}: not found on {action}: {detail}")
    if failure is Failure.UNSUPPORTED:
        return UnsupportedOperationError(f"{where}: {action} not supported: {detail}")
    return StoreBackendError(f"{where}: {action} failed: {detail}")
