"""``GET`` and ``HEAD``: objects (streamed, ranged, conditional) and folder listings.

A body is read from the store in budgeted pieces of at most ``piece_size`` bytes; the
first piece is read before the headers go out (it gives the size and version), later
ones are read conditioned on that version, so an object replaced mid-transfer aborts
the connection instead of mixing two versions. A small body read whole goes out with
its headers in one write. Whole bodies of up to 1 MiB of a store with ``head_now``
(local files) are kept and answered again while ``head_now`` vouches for them, and
conditional requests and ``HEAD`` take their metadata from ``head_now`` when it answers.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from cachetools import LRUCache

from asyncshard.buffers import BytesLike, unwrapped
from asyncshard.errors import AsyncShardError
from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from asyncshard.server.budget import ByteBudget, Reservation
from asyncshard.server.config import AppConfig
from asyncshard.server.listing import listing_html, listing_json, wants_json
from asyncshard.server.ranges import (
    content_range,
    parse_range_header,
    satisfiable_ranges,
    unsatisfied_range,
)
from asyncshard.server.responses import Aborted, CommonHeaders, error, log, object_headers
from asyncshard.server.stalls import StallWatch
from asyncshard.server.validators import etag_for, evaluate_preconditions, if_range_holds
from asyncshard.store import Data, GetResult, ObjectMeta, Store, WouldWait

#: Bytes handed to the socket per write (each a copy, so that nothing the transport
#: still buffers keeps a whole piece alive).
WRITE_SLICE = 64 * 1024
CONDITIONAL = ("If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range")
#: The first read of a plain GET (at most the piece size; page-cache reads on the loop go
#: up to 1 MiB too): a body of up to this much is read whole at once, and may be kept
#: (``Reader._bodies``).
KEPT_BODY = 1024 * 1024
#: Keys whose whole-body answer headers are remembered (:meth:`Reader.whole_headers`).
REMEMBERED_HEADERS = 4096
#: Bytes charged per remembered body beyond its own (key, headers, entry).
BODY_OVERHEAD = 1024

#: A remembered whole answer: the object's metadata, its headers and its body.
Remembered = tuple[ObjectMeta, dict[str, str], BytesLike]


def is_conditional(headers: Mapping[str, str]) -> bool:
    """Whether the request headers carry a precondition (a plain loop: cheaper per
    request than ``any`` over a generator)."""
    for name in CONDITIONAL:  # noqa: SIM110 (the loop is the point)
        if name in headers:
            return True
    return False


def _charge(entry: Remembered) -> int:
    return len(entry[2]) + BODY_OVERHEAD


@dataclass
class Out:
    """Where a body goes: its response, written under the stall watch."""

    response: web.StreamResponse
    transport: asyncio.Transport | None
    stalls: StallWatch

    async def write(self, data: Data | None) -> None:
        """Write ``data`` (``None``: end the body); a client that accepts nothing for the
        write timeout is disconnected (it would otherwise hold its piece forever)."""
        if self.transport is None:  # the client is gone: aiohttp raises the right error
            await self._write(data)
            return
        token = self.stalls.begin(self.transport)
        try:
            await self._write(data)
        finally:
            self.stalls.end(token)

    async def _write(self, data: Data | None) -> None:
        if data is None:
            await self.response.write_eof()
        else:
            await self.response.write(data)

    async def send(self, data: Data) -> None:
        """Write ``data`` in slices of :data:`WRITE_SLICE` bytes, each a copy (a slice of
        the piece would keep all of it alive for as long as the transport buffers it)."""
        view = memoryview(data)
        if len(view) <= WRITE_SLICE:
            await self.write(view)
            return
        for i in range(0, len(view), WRITE_SLICE):
            await self.write(bytes(view[i : i + WRITE_SLICE]))


@dataclass
class Piece:
    """Bytes of the object from offset ``at``, read ahead, and their share of the budget.

    ``data`` is cleared once written, so that the bytes are freed with their reservation.
    """

    at: int
    data: memoryview | None
    reservation: Reservation


class Reader:
    """The ``GET``/``HEAD`` handlers of one application."""

    def __init__(
        self,
        store: Store,
        config: AppConfig,
        budget: ByteBudget,
        stalls: StallWatch,
        common: CommonHeaders,
    ) -> None:
        self.store = store
        self.config = config
        self.budget = budget
        self.stalls = stalls
        self.common = common
        self._headers: dict[str, tuple[ObjectMeta, dict[str, str]]] = {}
        #: Whole bodies of up to :data:`KEPT_BODY` bytes answered again while
        #: :meth:`Store.head_now` returns the metadata object of their read (the object
        #: is unchanged since; a local file: one ``stat`` instead of a read). Only for a
        #: store that can answer so; the unsharded view keeps chunks in its own cache.
        self._bodies: LRUCache[str, Remembered] | None = None
        if config.data_cache_bytes > 0 and not config.unshard and store.supports_head_now:
            self._bodies = LRUCache(config.data_cache_bytes, getsizeof=_charge)
        #: One object each: the unsharded view recognises a remembered answer by it.
        self._first_slice = Range(0, min(KEPT_BODY, config.piece_size))
        self._small_slice = Range(0, min(WRITE_SLICE, config.piece_size))

    # -- listings -------------------------------------------------------------------------

    async def listing(self, request: web.BaseRequest, prefix: str) -> web.StreamResponse:
        if not self.store.supports_listing:
            return error(404, "404 Not Found: this server cannot list folders")
        keys, prefixes = await self.store.list_dir(prefix)
        if prefix and not keys and not prefixes and not await self._virtual_folder(prefix):
            return error(404, f"404 Not Found: no folder /{prefix}")
        headers = {"Cache-Control": "no-cache"}
        if wants_json(request.query, request.headers.get("Accept")):
            return web.json_response(listing_json(prefix, keys, prefixes), headers=headers)
        return web.Response(
            text=listing_html(prefix, keys, prefixes), content_type="text/html", headers=headers
        )

    async def _virtual_folder(self, prefix: str) -> bool:
        """Whether an empty-looking folder exists all the same: a folder of the unsharded
        view whose only files are hidden (a sharded scale lists no chunk names)."""
        return await self.store.has_folder(prefix)

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _first_read(ranges: list[ByteRange] | None, piece: int) -> Range | Suffix | None:
        """The store range of at most ``piece`` bytes that starts the body and reveals the
        size, or ``None`` when a ``HEAD`` must come first (multiple ranges, a suffix longer
        than ``piece``)."""
        if ranges is None:
            return Range(0, piece)
        if len(ranges) != 1:
            return None
        (rng,) = ranges
        if isinstance(rng, Range):
            return Range(rng.start, min(rng.end, rng.start + piece))
        if isinstance(rng, Offset):
            return Range(rng.offset, rng.offset + piece)
        return rng if rng.length <= piece else None

    async def read(self, request: web.BaseRequest, key: str) -> web.StreamResponse:
        headers = request.headers
        ranges = None if request.method == "HEAD" else parse_range_header(headers.get("Range"))
        if request.method != "HEAD" and not is_conditional(headers):
            answered = await self._read_now(request, key, ranges)
            if answered is not None:
                return answered
            wanted = self._first_read(ranges, self.config.piece_size)
            if wanted is not None:
                want = wanted.length if isinstance(wanted, Suffix) else wanted.end - wanted.start
                async with self.budget.reserve(max(want, 1)) as reservation:
                    first_range = self._first_read(ranges, reservation.size)
                    if first_range is not None:  # else a suffix longer than the budget allows
                        return await self._read_ahead(
                            request, key, ranges, first_range, reservation
                        )
        now = self.store.head_now(key)  # a revalidation (If-None-Match) is the usual case
        meta = await self.store.head(key) if isinstance(now, WouldWait) else now
        if meta is None:
            return error(404, f"404 Not Found: {key}")
        etag = etag_for(meta.version)
        status = evaluate_preconditions(
            request.method, headers, exists=True, etag=etag, last_modified=meta.last_modified
        )
        if status == 304:
            not_modified = object_headers(key, meta, self.config.cache_control)
            del not_modified["Content-Type"], not_modified["Accept-Ranges"]
            return web.Response(status=304, headers=not_modified)
        if status is not None:
            return error(status, f"{status} Precondition Failed: {key}")
        if ranges is not None and not if_range_holds(
            headers.get("If-Range"), etag, meta.last_modified
        ):
            ranges = None
        if request.method == "HEAD":
            return await self._head_response(request, key, meta)
        return await self._body(request, key, meta, ranges, None)

    async def _read_now(
        self, request: web.BaseRequest, key: str, ranges: list[ByteRange] | None
    ) -> web.StreamResponse | None:
        """The answer when the store has the body's first bytes at hand
        (:meth:`~asyncshard.store.Store.get_now`: a cached chunk, a page-cache read; up
        to :data:`KEPT_BODY` bytes for a plain GET while the budget is hardly used, else
        :data:`WRITE_SLICE`), which is most chunks: no coroutine below, no budget wait.
        A body of at most :data:`WRITE_SLICE` goes out in one write; more is reserved
        from the budget if free at once. ``None``: read the usual way."""
        bodies = self._bodies
        if ranges is not None:
            first_range = self._first_read(ranges, WRITE_SLICE)
        else:
            if bodies is not None:
                known = bodies.get(key)
                if known is not None:
                    if self.store.head_now(key) is known[0]:
                        return await self._whole(request, key, known)
                    del bodies[key]  # changed, or read too soon after a change
            # large only while the budget is hardly used: with slow clients holding
            # pieces, first pieces stay small, and no large read is made to be dropped
            first_range = (
                self._first_slice
                if self.budget.mostly_free(self._first_slice.end)
                else self._small_slice
            )
        if first_range is None:
            return None
        first = self.store.get_now(key, first_range)
        if isinstance(first, WouldWait):
            return None
        if first is None:
            return error(404, f"404 Not Found: {key}")
        meta = first.meta
        if ranges is None and len(first.data) == meta.size:  # the whole body
            whole = meta, self.whole_headers(key, meta), unwrapped(first.data)
            if bodies is not None and _charge(whole) <= bodies.maxsize:
                bodies[key] = whole
            return await self._whole(request, key, whole)
        reservation = self.budget.try_reserve(max(len(first.data), 1))
        if reservation is None:  # the budget is short: wait for it the usual way
            return None
        return await self._body_from(
            request, key, meta, ranges, self._piece(first, first_range, reservation)
        )

    async def _whole(
        self, request: web.BaseRequest, key: str, whole: Remembered
    ) -> web.StreamResponse | None:
        """The answer of a whole body at hand (just read, or kept): at once with its
        headers up to :data:`WRITE_SLICE` bytes, else written in slices under the stall
        watch like any body (its bytes reserved from the budget if free at once; ``None``
        otherwise: read the usual way)."""
        meta, headers, body = whole
        if len(body) <= WRITE_SLICE:
            return web.Response(status=200, headers=headers, body=body)
        reservation = self.budget.try_reserve(len(body))
        if reservation is None:
            return None
        return await self._body_from(
            request, key, meta, None, Piece(0, memoryview(body), reservation)
        )

    async def _body_from(
        self,
        request: web.BaseRequest,
        key: str,
        meta: ObjectMeta,
        ranges: list[ByteRange] | None,
        piece: Piece,
    ) -> web.StreamResponse:
        """:meth:`_body` starting with ``piece``, whose reservation is returned however
        the answer ends (a client gone mid-body, a stall, a 416, several ranges)."""
        try:
            return await self._body(request, key, meta, ranges, piece)
        finally:
            piece.reservation.release()

    def whole_headers(self, key: str, meta: ObjectMeta) -> dict[str, str]:
        """:func:`object_headers` of a whole ``200`` answer, remembered per key for as long
        as its metadata stays the same (a viewer asks for the same chunks again and
        again). Read-only: ``aiohttp`` copies it into each response."""
        known = self._headers.get(key)
        if known is not None and (known[0] is meta or known[0] == meta):
            return known[1]
        headers = object_headers(key, meta, self.config.cache_control)
        if len(self._headers) >= REMEMBERED_HEADERS:
            self._headers.clear()
        self._headers[key] = meta, headers
        return headers

    async def _read_ahead(
        self,
        request: web.BaseRequest,
        key: str,
        ranges: list[ByteRange] | None,
        first_range: Range | Suffix,
        reservation: Reservation,
    ) -> web.StreamResponse:
        """Answer with one store read first: it gives the size and starts the body."""
        first = await self.store.get_object(key, first_range)
        if first is None:
            return error(404, f"404 Not Found: {key}")
        reservation.keep(len(first.data))
        meta = first.meta
        piece = self._piece(first, first_range, reservation)
        del first  # the piece holds the only reference: freed once written
        return await self._body(request, key, meta, ranges, piece)

    @staticmethod
    def _piece(first: GetResult, first_range: Range | Suffix, reservation: Reservation) -> Piece:
        """The piece a first read gave: its bytes and where they start in the object."""
        size = first.meta.size
        if isinstance(first_range, Suffix):
            at = max(size - first_range.length, 0)
        else:
            at = min(first_range.start, size)
        return Piece(at, memoryview(first.data), reservation)

    async def _head_response(
        self, request: web.BaseRequest, key: str, meta: ObjectMeta
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers=object_headers(key, meta, self.config.cache_control)
        )
        response.content_length = meta.size
        await self.common.prepare(request, response)
        await response.write_eof()
        return response

    async def _body(
        self,
        request: web.BaseRequest,
        key: str,
        meta: ObjectMeta,
        ranges: list[ByteRange] | None,
        piece: Piece | None,
    ) -> web.StreamResponse:
        size = meta.size
        headers = object_headers(key, meta, self.config.cache_control)
        if ranges is None:
            spans = [(0, size)]
            status = 200
        else:
            spans = satisfiable_ranges(ranges, size)
            if not spans:
                headers["Content-Range"] = unsatisfied_range(size)
                del headers["Content-Type"]
                return error(416, f"416 Range Not Satisfiable: {key} has {size} bytes", headers)
            status = 206
        if len(spans) == 1:
            start, end = spans[0]
            if status == 206:
                headers["Content-Range"] = content_range(start, end, size)
            whole = self._whole_body(piece, start, end)
            if whole is not None:  # small and read already: headers and body in one write
                return web.Response(status=status, headers=headers, body=whole)
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = end - start
            await self.common.prepare(request, response)
            out = self._out(request, response)
            await self._stream(out, key, meta, start, end, piece)
        else:
            out = await self._multipart(request, key, meta, spans, headers)
        await out.write(None)
        return out.response

    @staticmethod
    def _whole_body(piece: Piece | None, start: int, end: int) -> memoryview | None:
        """The body ``[start, end)`` when the read-ahead piece holds all of it and it is
        no larger than :data:`WRITE_SLICE` (what a stalled client may keep buffered); the
        piece's reservation is released then (the transport owns the bytes)."""
        if piece is None or piece.data is None or end - start > WRITE_SLICE:
            return None
        if not piece.at <= start <= end <= piece.at + len(piece.data):
            return None
        body = piece.data[start - piece.at : end - piece.at]
        piece.data = None
        piece.reservation.release()
        return body

    def _out(self, request: web.BaseRequest, response: web.StreamResponse) -> Out:
        return Out(response, request.transport, self.stalls)

    async def _multipart(
        self,
        request: web.BaseRequest,
        key: str,
        meta: ObjectMeta,
        spans: list[tuple[int, int]],
        headers: dict[str, str],
    ) -> Out:
        boundary = secrets.token_hex(16)
        part_type = headers.pop("Content-Type")
        heads = [
            (
                ("\r\n" if i else "")
                + f"--{boundary}\r\nContent-Type: {part_type}\r\n"
                + f"Content-Range: {content_range(s, e, meta.size)}\r\n\r\n"
            ).encode()
            for i, (s, e) in enumerate(spans)
        ]
        tail = f"\r\n--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/byteranges; boundary={boundary}"
        response = web.StreamResponse(status=206, headers=headers)
        response.content_length = sum(map(len, heads)) + sum(e - s for s, e in spans) + len(tail)
        await self.common.prepare(request, response)
        out = self._out(request, response)
        for head, (start, end) in zip(heads, spans, strict=True):
            await out.write(head)
            await self._stream(out, key, meta, start, end, None)
        await out.write(tail)
        return out

    async def _stream(
        self,
        out: Out,
        key: str,
        meta: ObjectMeta,
        start: int,
        end: int,
        piece: Piece | None,
    ) -> None:
        """Write bytes ``[start, end)`` of the object, a budgeted piece at a time."""
        pos = start
        if piece is not None and piece.data is not None:
            data, piece.data = piece.data, None
            if piece.at <= pos < piece.at + len(data):
                stop = min(end, piece.at + len(data))
                await out.send(data[pos - piece.at : stop - piece.at])
                pos = stop
            del data
            piece.reservation.release()
        while pos < end:
            async with self.budget.reserve(min(end - pos, self.config.piece_size)) as reservation:
                stop = pos + reservation.size
                await self._send_piece(out, key, meta, pos, stop)
            pos = stop

    async def _send_piece(
        self, out: Out, key: str, meta: ObjectMeta, start: int, stop: int
    ) -> None:
        """Read bytes ``[start, stop)`` at the body's version and write them."""
        try:
            result = await self.store.get_object(key, Range(start, stop), if_match=meta.version)
        except AsyncShardError as exc:
            log.warning("%s changed or failed while being sent: %s", key, exc)
            raise Aborted(f"{key}: {exc}", out.response) from exc
        if result is None or len(result.data) != stop - start:
            log.warning("%s vanished or shrank while being sent", key)
            raise Aborted(f"{key}: vanished or shrank while being sent", out.response)
        await out.send(result.data)
