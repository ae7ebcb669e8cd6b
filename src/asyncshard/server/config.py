"""How the server answers: one :class:`AppConfig`, built once (by ``asyncshard serve``
from its flags, or by a caller) and handed unchanged to :func:`~.app.make_app`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from asyncshard.cache import DEFAULT_CACHE_BYTES
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER

#: Largest single read the server makes from the store while streaming a body.
PIECE_SIZE = 4 * 1024 * 1024
#: Default budget of body bytes held by all requests at once (see ``budget.py``).
DEFAULT_BUFFER_BYTES = 128 * 1024 * 1024
#: A client that accepts no write slice for this many seconds is disconnected.
DEFAULT_WRITE_TIMEOUT = 60.0
#: Chunk-data cache of ``--unshard``, or kept small files of a local store (per process).
DEFAULT_DATA_CACHE_BYTES = 64 * 1024 * 1024
#: Largest accepted PUT body.
MAX_UPLOAD = 1024 * 1024 * 1024
#: Default ``Cache-Control`` of objects: caches may keep them but must revalidate (cheap,
#: thanks to ETags). Immutable datasets can use ``"public, max-age=86400, immutable"``.
DEFAULT_CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class AppConfig:
    """How the application answers (plain and picklable: ``--workers`` ships it).

    Attributes:
        allow_origin: ``Access-Control-Allow-Origin``: ``*``, one origin or a
            comma-separated list (the request's ``Origin`` is echoed when listed);
            ``""`` sends no CORS headers.
        cache_control: ``Cache-Control`` of objects (``None`` or ``""``: none sent).
        unshard: serve sharded Zarr arrays and precomputed volumes as unsharded
            (:class:`~asyncshard.views.unsharded.UnshardedView`); read-only.
        cache_bytes: the shard-index cache of the unsharded view.
        data_cache_bytes: the unsharded view's chunk-data cache (``0``: none): viewers
            re-read chunks, and a streamed encoded chunk is decoded once, not per piece.
            Serving a store with ``head_now`` (local files) as it is, the whole
            answers (up to 1 MiB) kept and answered again after a ``stat``.
        recheck_after: seconds a cached index may answer "no such chunk" (404) before
            the shard is checked again (see ``ShardedAdapter``).
        writable: accept ``PUT`` and ``DELETE`` (with the token).
        token: the bearer token writes must carry (``Authorization: Bearer <token>``).
        piece_size: largest single store read while streaming a body.
        buffer_bytes: budget of body bytes held by all requests at once (pieces shrink
            to 64 KiB when it runs low; see ``budget.py``).
        write_timeout: seconds a client may accept no data before it is disconnected.
        max_upload: largest ``PUT`` body (larger ones answer 413).
    """

    allow_origin: str = "*"
    cache_control: str | None = DEFAULT_CACHE_CONTROL
    unshard: bool = False
    cache_bytes: int = DEFAULT_CACHE_BYTES
    data_cache_bytes: int = DEFAULT_DATA_CACHE_BYTES
    recheck_after: float = DEFAULT_RECHECK_AFTER
    writable: bool = False
    token: str | None = None
    piece_size: int = PIECE_SIZE
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    max_upload: int = MAX_UPLOAD

    def __post_init__(self) -> None:
        if self.writable and not self.token:
            raise ValueError("a writable server needs a token")
        if self.writable and self.unshard:
            raise ValueError(
                "the unsharded view is read-only: writable and unshard exclude each other"
            )
        if self.piece_size <= 0 or self.buffer_bytes <= 0 or self.write_timeout <= 0:
            raise ValueError("piece_size, buffer_bytes and write_timeout must be positive")
        if self.cache_bytes < 0 or self.data_cache_bytes < 0 or self.recheck_after < 0:
            raise ValueError("cache_bytes, data_cache_bytes and recheck_after must be >= 0")

    @functools.cached_property
    def allowed_origins(self) -> frozenset[str]:
        """The origins of ``allow_origin``."""
        return frozenset(o.strip() for o in self.allow_origin.split(",") if o.strip())
