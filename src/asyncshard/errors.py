"""The asyncshard exception hierarchy: every error the library raises on purpose."""

from __future__ import annotations

from typing import Any


class AsyncShardError(Exception):
    """Base class of every error asyncshard raises on purpose."""


class InvalidKeyError(AsyncShardError, ValueError):
    """A key (or prefix) is not a clean ``/``-separated relative path."""


class InvalidRangeError(AsyncShardError, ValueError):
    """A byte range is malformed (negative, or end before start)."""


class ConflictError(AsyncShardError):
    """A conditional read or write failed: the object is not the expected version."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class PartialWriteError(AsyncShardError):
    """A write of several objects failed for some of them; the others were written.

    Nothing the call started is still running when this is raised. ``written`` lists the
    keys that were written (or erased), ``failed`` maps each key that was not to the error
    that stopped it (the first of those is also this error's ``__cause__``). Writes to
    different objects are not atomic together; a write to one object is.
    """

    def __init__(self, written: list[str], failed: dict[str, BaseException]) -> None:
        first = next(iter(failed.values()))
        super().__init__(
            f"{len(failed)} of {len(failed) + len(written)} keys were not written "
            f"(first: {next(iter(failed))!r}: {type(first).__name__}: {first})"
        )
        self.written = written
        self.failed = failed


class ReadOnlyError(AsyncShardError):
    """The store does not accept writes."""


class UnsupportedOperationError(AsyncShardError):
    """The store cannot do this operation (for example listing over plain HTTP)."""


class StorePermissionError(AsyncShardError, PermissionError):
    """The backend refused the credentials or the access."""


class StoreAuthenticationError(StorePermissionError):
    """The backend rejected the credentials themselves (an unknown key, a wrong secret or
    signature, an expired token), not only the access asked for."""


class StoreConnectionError(AsyncShardError, ConnectionError):
    """The backend could not be reached or the transfer broke; retrying may help."""


class UnknownSchemeError(AsyncShardError, ValueError):
    """``open_store`` was given a URL scheme it does not know."""


class FormatError(AsyncShardError, ValueError):
    """Stored bytes or metadata do not follow the format they claim."""


class InvalidMetadataError(FormatError):
    """Array metadata or a sharding specification is invalid or unsupported."""


class CorruptShardError(FormatError):
    """A shard's index or data is inconsistent (truncated, out of range, duplicated)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class ChecksumError(CorruptShardError):
    """A checksum stored with the data does not match it."""


class StoreBackendError(AsyncShardError):
    """The backend failed in a way asyncshard does not classify further (see the message)."""


class CorruptResponseError(StoreBackendError):
    """The backend answered a read with other bytes than those asked (another range than
    the one asked and none that holds it, or a body shorter or longer than it says)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class ConversionError(AsyncShardError):
    """A conversion cannot proceed safely (unexpected objects, metadata changed meanwhile)."""


class StoreConfigError(AsyncShardError, ValueError):
    """A store cannot be opened as configured (bad URL, bucket or options).

    Raised when the store is opened, before any request: a malformed URL, a missing or
    invalid bucket, container or host, unknown options or values of the wrong kind.
    """


class UnknownOptionError(StoreConfigError, TypeError):
    """An option no layer on the way down takes (a typo, or one for another backend).

    A ``TypeError`` as for an unexpected keyword argument, raised before any request;
    ``options`` names the options that were refused.
    """

    def __init__(self, message: str, options: list[str] | None = None) -> None:
        super().__init__(message)
        self.options = options or []


class EventLoopError(AsyncShardError, ValueError):
    """``ASYNCSHARD_EVENT_LOOP`` names a loop that is unknown or not installed."""


class BucketNotFoundError(StoreConfigError):
    """The bucket or container a store names does not exist (not a missing key)."""


class NothingToConvertError(ConversionError):
    """A conversion found no array at all where it was pointed."""


class NoShardedDataError(AsyncShardError):
    """``verify``/``repair`` found no sharded dataset where they were pointed."""


class DatasetMismatchError(InvalidMetadataError):
    """``verify``/``repair`` were asked for what the store does not hold or cannot be
    checked as asked: an unknown dataset, a ``--from`` source that stores its chunks
    otherwise, a codec ``--decode`` does not know."""


class ShardShapeError(ConversionError, ValueError):
    """A shard shape does not fit an array (dimensions, or not positive)."""


class OverlappingStoresError(ConversionError, ValueError):
    """A copy's destination is its source, lies inside it or holds it (compared as
    places: backend, endpoint, bucket and prefix, not as written)."""


class CopyError(AsyncShardError):
    """Some objects of a :func:`~asyncshard.copy_tree` were not copied.

    The others were (or were already equal at the destination); ``summary`` counts
    them and names the keys that failed, with their errors. Running the copy again
    copies what is missing and skips what is equal.
    """

    def __init__(self, message: str, summary: Any) -> None:
        super().__init__(message)
        self.summary = summary


class NothingToCopyError(AsyncShardError):
    """A recursive copy found no object at its source (a mistyped prefix, an empty
    folder): never a silent success."""


class ThrottledError(StoreConnectionError):
    """The backend kept refusing a request for its rate (S3 ``SlowDown``/503, 429, GCS
    ``rateLimitExceeded``, Azure ``ServerBusy``) until the store's time budget
    (``throttle_timeout``) ran out; ``rate`` is the request rate (per second) the
    endpoint's window had reached."""

    def __init__(self, message: str, *, rate: float) -> None:
        super().__init__(message)
        self.rate = rate
