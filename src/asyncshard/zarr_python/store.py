"""ZarrStore: any asyncshard Store as a zarr-python 3 store.

``ZarrStore(store_or_url, mode=..., read_only=..., **options)`` wraps an asyncshard
:class:`~asyncshard.store.Store`, or opens one from a URL with
:func:`~asyncshard.backends.open_store`'s conventions and options. zarr-python, xarray
and dask then read and write through asyncshard's backends, and the cost of what they
do shows in ``zarr_store.stats`` (the wrapped store's counters).

The ``mode`` chooses the key space zarr-python sees (:mod:`asyncshard.zarr_python.modes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, Self
from urllib.parse import urlsplit

import zarr
from zarr.abc.store import ByteRequest
from zarr.abc.store import Store as ZarrABCStore
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from asyncshard.backends.registry import StoreLocation, merge_options, open_store
from asyncshard.blocking import run_blocking
from asyncshard.errors import ConflictError
from asyncshard.store import Store, StoreStats
from asyncshard.views.unsharded import UnshardedView
from asyncshard.zarr_python.buffers import to_buffer, to_bytes_like, to_range
from asyncshard.zarr_python.guard import ShardGuard
from asyncshard.zarr_python.modes import Mode, present


def _folder(prefix: str) -> str:
    """``""`` or ``prefix`` as a folder ending in one ``/`` (zarr's prefix convention)."""
    return "" if prefix in ("", "/") else prefix.rstrip("/") + "/"


def _reopen(url: str, options: dict[str, Any], mode: Mode, read_only: bool) -> ZarrStore:
    return ZarrStore(url, mode=mode, read_only=read_only, **options)


class ZarrStore(ZarrABCStore):
    """A ``zarr.abc.store.Store`` over an asyncshard Store.

    Args:
        store: an asyncshard Store, or any location of ``open_store``: a URL
            (``s3://bucket/prefix``, ``file:///data``, ``memory://``, ...), a path, an
            obstore store or an obspec client.
        mode: ``"pass-through"`` (keys unchanged; zarr-python does its own sharding,
            its shard rewrites made conditional: :mod:`~asyncshard.zarr_python.guard`)
            or ``"inner-chunks"`` (sharded arrays appear unsharded).
        read_only: refuse writes, as zarr-python stores do (``ValueError``). ``None``
            (the default): read-only exactly when the store cannot write.
        storage_options: storage options for ``open_store`` (credentials, endpoint,
            caps...) as one dict; refused with a Store.
        **options: the same as keywords.

    Attributes:
        inner: the asyncshard Store given or opened (its ``stats`` count requests).
        view: the Store zarr-python's keys address: ``inner`` in pass-through mode.

    Two ZarrStores are equal when they wrap the same Store object, or were opened from
    the same URL and options (except ``memory://``, which names no shared place), in the
    same mode and read-only state. Stores opened from a URL pickle as that URL; the
    others (a Store object, ``memory://``) have nothing another process could reopen and
    raise ``TypeError``. Closing only marks the ZarrStore closed: the asyncshard Store
    may be shared (``with_read_only`` copies share it) and stays usable.
    """

    inner: Store
    view: Store
    mode: Mode

    def __init__(
        self,
        store: StoreLocation,
        *,
        mode: Mode = "pass-through",
        read_only: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        opts = merge_options(storage_options, options)
        inner = open_store(store, opts)  # refuses options with a ready Store
        self._url: str | None = None
        self._options: dict[str, Any] = {}
        if isinstance(store, (str, os.PathLike)):
            self._url, self._options = os.fspath(store), opts
        elif inner is not store and inner.url is not None:  # an obstore store
            self._url, self._options = inner.url, inner.open_options
        self.view = present(inner, mode)
        self._guard = ShardGuard(inner) if self.view is inner else None
        self.inner = inner
        self.mode = mode
        if read_only is None:
            read_only = not self.view.supports_writes
        super().__init__(read_only=read_only)

    # -- identity -----------------------------------------------------------------------

    @property
    def stats(self) -> StoreStats:
        """The wrapped store's counters: requests and bytes, as the backend saw them."""
        return self.inner.stats

    def _location(self) -> tuple[str, dict[str, Any]] | None:
        """The URL and options that reopen this store elsewhere, if any."""
        if self._url is None or urlsplit(self._url).scheme.lower() == "memory":
            return None
        return self._url, self._options

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ZarrStore):
            return False
        here = self._location()
        same = self.inner is other.inner or (here is not None and here == other._location())
        return same and self.mode == other.mode and self.read_only == other.read_only

    __hash__ = None  # type: ignore[assignment]  # mutable state, like zarr's own stores

    def __reduce__(self) -> tuple[Any, ...]:
        location = self._location()
        if location is None:
            raise TypeError(
                f"{self!r} cannot be pickled: it wraps a Store object or a memory store, "
                "which another process cannot reopen; build the ZarrStore from a URL"
            )
        url, options = location
        return _reopen, (url, options, self.mode, self.read_only)

    def __str__(self) -> str:
        return self._url if self._url is not None else repr(self.inner)

    def __repr__(self) -> str:
        return f"ZarrStore({self.inner!r}, mode={self.mode!r}, read_only={self.read_only})"

    def with_read_only(self, read_only: bool = False) -> Self:
        """A new, unopened ZarrStore over the same asyncshard Store."""
        clone = object.__new__(type(self))  # not copy.copy: that would go through __reduce__
        clone.__dict__.update(self.__dict__)
        clone._read_only = read_only
        clone._is_open = False
        return clone

    def with_mode(self, mode: Mode) -> ZarrStore:
        """A ZarrStore in ``mode`` over the same asyncshard Store (opened from the same
        URL, it pickles as that URL in ``mode``)."""
        clone = ZarrStore(self.inner, mode=mode, read_only=True if self.read_only else None)
        clone._url, clone._options = self._url, dict(self._options)
        return clone

    # -- sharded arrays -------------------------------------------------------------------

    def create_sharded_array(self, name: str, *, shards: Any, **kwargs: Any) -> zarr.Array[Any]:
        """Create a sharded array: ``zarr.create_array(store, name=name, shards=shards,
        **kwargs)`` written through the wrapped store, keys unchanged, then opened
        through this store (in inner-chunk mode it appears unsharded: its chunks are the
        inner chunks, ``chunks=``). Synchronous, like ``zarr.create_array``.

        This is how arrays get sharded in inner-chunk mode: an array created through the
        view with ``shards=`` is refused, since zarr-python would then write whole shards
        at keys the view reads as inner chunks.
        """
        self._check_writable()
        plain = ZarrStore(self.inner, mode="pass-through", read_only=False)
        zarr.create_array(plain, name=name, shards=shards, **kwargs)
        if isinstance(self.view, UnshardedView):
            self.view.folders.invalidate_around(_folder(name))
        return zarr.open_array(self, path=name, mode="r+")

    # -- capabilities -------------------------------------------------------------------

    @property
    def supports_writes(self) -> bool:
        return self.view.supports_writes

    @property
    def supports_deletes(self) -> bool:
        return self.view.supports_writes

    @property
    def supports_listing(self) -> bool:
        return self.view.supports_listing

    # -- reads --------------------------------------------------------------------------

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        rng = to_range(byte_range)
        if rng is None and self._guard is not None and not self.read_only:  # a shard to rewrite?
            data = await self._guard.get(key)
        else:
            data = await self.view.get(key, rng)
        return to_buffer(data, prototype or default_buffer_prototype())

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """One coalescing ``get_partial_values`` of the asyncshard store for the batch."""
        datas = await self.view.get_partial_values((k, to_range(r)) for k, r in key_ranges)
        return [to_buffer(data, prototype) for data in datas]

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        batch = list(requests)
        datas = await self.view.get_partial_values((k, to_range(r)) for k, _, r in batch)
        for (key, prototype, _), data in zip(batch, datas, strict=True):
            yield key, to_buffer(data, prototype)

    async def exists(self, key: str) -> bool:
        return await self.view.exists(key)

    async def getsize(self, key: str) -> int:
        meta = await self.view.head(key)
        if meta is None:
            raise FileNotFoundError(key)
        return meta.size

    async def getsize_prefix(self, prefix: str) -> int:
        """Total size of the objects below the folder ``prefix`` (one HEAD per object)."""
        keys = [key async for key in self.view.list_prefix(_folder(prefix))]
        metas = await asyncio.gather(*(self.view.head(key) for key in keys))
        return sum(meta.size for meta in metas if meta is not None)

    # -- writes -------------------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        if self._guard is not None:
            await self._guard.set(key, to_bytes_like(value))
        else:
            await self.view.set(key, to_bytes_like(value))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Create ``key`` unless it exists: one conditional write where the store has them.

        On a store without conditional writes this is zarr's check-then-write, which a
        concurrent writer can race.
        """
        self._check_writable()
        data = to_bytes_like(value)
        if not self.view.supports_conditional_writes:
            if not await self.view.exists(key):
                await self.view.set(key, data)
            return
        with contextlib.suppress(ConflictError):
            await self.view.set(key, data, if_absent=True)

    async def delete(self, key: str) -> None:
        self._check_writable()
        if self._guard is not None:
            await self._guard.delete(key)
        else:
            await self.view.erase_values([key])

    async def delete_dir(self, prefix: str) -> None:
        if not self.supports_deletes or not self.supports_listing:
            raise NotImplementedError
        self._check_writable()
        await self.view.erase_prefix(_folder(prefix))

    # -- zarr's synchronous store surface (zarr >= 3.4) ---------------------------------

    #: zarr >= 3.4 switches its codec pipeline to synchronous per-chunk I/O on stores
    #: that offer ``*_sync`` methods, unless this is false. asyncshard's I/O is async:
    #: zarr's async path keeps a burst of chunk reads one batched ``get_partial_values``
    #: (the request budgets), which one synchronous call per chunk would not.
    _supports_sync_io = False

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """Synchronous :meth:`get`, from any thread."""
        return run_blocking(self.get(key, prototype, byte_range))

    def set_sync(self, key: str, value: Buffer) -> None:
        """Synchronous :meth:`set`, from any thread."""
        run_blocking(self.set(key, value))

    def delete_sync(self, key: str) -> None:
        """Synchronous :meth:`delete`, from any thread."""
        run_blocking(self.delete(key))

    # -- listing ------------------------------------------------------------------------

    def list(self) -> AsyncIterator[str]:
        return self.view.list()

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return self.view.list_prefix(prefix)

    async def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        """Names (not keys) of the objects and folders directly below ``prefix``."""
        base = _folder(prefix)
        keys, prefixes = await self.view.list_dir(base)
        for key in keys:
            yield key[len(base) :]
        for sub in prefixes:
            yield sub[len(base) : -1]
