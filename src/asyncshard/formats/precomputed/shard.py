"""Pure encode/decode of ``neuroglancer_uint64_sharded_v1`` shard files (no I/O).

A shard file is the *shard index* (``2**minishard_bits`` entries of uint64 LE
``[start, end)``, relative to the end of the shard index), then chunk data and
*minishard indexes* (``[3, n]`` uint64 LE: delta-encoded ids, delta-encoded offsets
relative to the end of the previous chunk, sizes). All offsets returned here are
absolute byte offsets in the shard object.

Decoding follows tensorstore: delta sums wrap modulo ``2**64`` (so a writer may place
chunks out of order), entries are sorted by id, duplicate ids are rejected, and every
resulting byte range must satisfy ``start <= end`` and fit in the shard.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from asyncshard.buffers import BytesLike
from asyncshard.errors import CorruptShardError, FormatError
from asyncshard.formats.health import ShardHealth, overlapping
from asyncshard.formats.precomputed.spec import ShardingSpec, U64Array, as_uint64_array

__all__ = [
    "DEFAULT_MAX_CHUNK_NBYTES",
    "DEFAULT_MAX_INDEX_NBYTES",
    "MinishardIndex",
    "build_shard",
    "build_shards",
    "check_placement",
    "decode_chunk_data",
    "decode_minishard_index",
    "decode_shard_index",
    "encode_chunk_data",
    "encode_minishard_index",
    "encode_shard_index",
    "find_chunks",
    "gunzip_bounded",
    "inspect_shard",
    "minishard_index_range",
    "shard_index_nbytes",
    "split_shard",
]


DEFAULT_MAX_INDEX_NBYTES = 256 * 2**20
"""Default cap on a decompressed minishard index (about 11 million chunks)."""
DEFAULT_MAX_CHUNK_NBYTES = 2**30
"""Default cap on one decompressed chunk."""

_MAX_U64 = 2**64 - 1
_LE_U64 = np.dtype("<u8")
_GZIP_LEVEL = 6


class MinishardIndex(NamedTuple):
    """A decoded minishard index: ids ascending, absolute ``[start, end)`` byte ranges."""

    ids: U64Array
    starts: U64Array
    ends: U64Array


# --------------------------------------------------------------------------- compression


def gunzip_bounded(data: BytesLike, max_nbytes: int, *, key: str | None = None) -> bytes:
    """Decompress gzip ``data`` (one or more members) to at most ``max_nbytes`` bytes.

    ``CorruptShardError`` (naming ``key``) for malformed or truncated gzip, or past the cap.
    """
    out = bytearray()
    pending: BytesLike = data
    while True:
        decomp = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            piece = decomp.decompress(pending, max_nbytes - len(out) + 1)
        except zlib.error as exc:
            raise CorruptShardError(f"invalid gzip data: {exc}", key=key) from exc
        out += piece
        if len(out) > max_nbytes:
            raise CorruptShardError(f"gzip data decompresses past {max_nbytes} bytes", key=key)
        if not decomp.eof:
            raise CorruptShardError("truncated gzip data", key=key)
        pending = decomp.unused_data
        if not pending:
            return bytes(out)


def _gzip(data: BytesLike) -> bytes:
    return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)


def _decode(buf: BytesLike, encoding: str, max_nbytes: int, key: str | None) -> BytesLike:
    return gunzip_bounded(buf, max_nbytes, key=key) if encoding == "gzip" else buf


# --------------------------------------------------------------------------- shard index


def shard_index_nbytes(spec: ShardingSpec) -> int:
    """Size of the shard index at the start of every shard: ``16 * 2**minishard_bits``."""
    return 16 << spec.minishard_bits


def decode_shard_index(
    buf: BytesLike,
    spec: ShardingSpec,
    *,
    key: str | None = None,
    shard_size: int | None = None,
) -> U64Array:
    """Decode a shard index into an ``(2**minishard_bits, 2)`` array of relative ``[start, end)``.

    Validates the length, ``start <= end``, and that every range fits in the shard object
    (``2**64`` bytes, or ``shard_size`` when known); ``CorruptShardError`` naming ``key``.
    """
    nbytes = shard_index_nbytes(spec)
    if len(buf) != nbytes:
        raise CorruptShardError(f"shard index has {len(buf)} bytes, expected {nbytes}", key=key)
    index: U64Array = np.frombuffer(buf, dtype=_LE_U64).astype(np.uint64).reshape(-1, 2)
    bad = index[:, 0] > index[:, 1]
    if bool(bad.any()):
        minishard = int(np.argmax(bad))
        raise CorruptShardError(
            f"shard index entry {minishard} has start > end: {index[minishard].tolist()}", key=key
        )
    limit = _MAX_U64 if shard_size is None else shard_size
    _check_ends(index[:, 1], limit - nbytes, "minishard index", key)
    return index


def _check_ends(rel_ends: U64Array, max_rel_end: int, what: str, key: str | None) -> None:
    """Raise unless every relative end is at most ``max_rel_end`` (which may be negative)."""
    if rel_ends.size == 0:
        return
    worst = int(np.max(rel_ends))
    if worst > max_rel_end:
        raise CorruptShardError(
            f"{what} byte range ends past the shard ({worst} > {max(max_rel_end, -1)} "
            "relative to the end of the shard index)",
            key=key,
        )


def minishard_index_range(shard_index: U64Array, minishard: int) -> tuple[int, int]:
    """Absolute ``[start, end)`` of a minishard's index in the shard (empty when no chunks)."""
    base = 16 * shard_index.shape[0]
    return base + shard_index.item(minishard, 0), base + shard_index.item(minishard, 1)


def encode_shard_index(shard_index: npt.ArrayLike) -> bytes:
    """Encode an ``(n, 2)`` array of relative ``[start, end)`` as the shard index bytes."""
    arr = as_uint64_array(shard_index, "shard index")
    return arr.reshape(-1, 2).astype(_LE_U64).tobytes()


# --------------------------------------------------------------------------- minishard index


def decode_minishard_index(
    buf: BytesLike,
    spec: ShardingSpec,
    *,
    key: str | None = None,
    shard_size: int | None = None,
    max_nbytes: int = DEFAULT_MAX_INDEX_NBYTES,
) -> MinishardIndex:
    """Decode one (possibly gzip-encoded) minishard index to ids and absolute byte ranges.

    The result is sorted by id. ``CorruptShardError`` naming ``key`` for a length that is not
    a multiple of 24, bad gzip, duplicate ids, ``start > end``, or a range past the shard.
    """
    raw = _decode(buf, spec.minishard_index_encoding, max_nbytes, key)
    if len(raw) % 24:
        raise CorruptShardError(
            f"minishard index has {len(raw)} bytes, not a multiple of 24", key=key
        )
    table = np.frombuffer(raw, dtype=_LE_U64).astype(np.uint64).reshape(3, -1)
    ids = np.cumsum(table[0], dtype=np.uint64)
    starts, ends = _decode_ranges(table[1], table[2], key)
    base = shard_index_nbytes(spec)
    limit = _MAX_U64 if shard_size is None else shard_size
    _check_ends(ends, limit - base, "chunk", key)
    return _sorted_unique(ids, starts + np.uint64(base), ends + np.uint64(base), key)


def _decode_ranges(
    offset_deltas: U64Array, sizes: U64Array, key: str | None
) -> tuple[U64Array, U64Array]:
    """Relative chunk ``[start, end)`` from offset deltas and sizes (sums wrap mod ``2**64``)."""
    steps = np.empty(2 * offset_deltas.size, dtype=np.uint64)
    steps[0::2] = offset_deltas
    steps[1::2] = sizes
    bounds = np.cumsum(steps, dtype=np.uint64)
    starts, ends = bounds[0::2], bounds[1::2]
    bad = starts > ends  # the size wrapped past 2**64
    if bool(bad.any()):
        i = int(np.argmax(bad))
        raise CorruptShardError(f"chunk byte range overflows (entry {i})", key=key)
    return starts, ends


def _sorted_unique(
    ids: U64Array, starts: U64Array, ends: U64Array, key: str | None
) -> MinishardIndex:
    if ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):
        order = np.argsort(ids, kind="stable")
        ids, starts, ends = ids[order], starts[order], ends[order]
        dup = ids[1:] == ids[:-1]
        if bool(dup.any()):
            chunk = int(ids[1:][dup][0])
            raise CorruptShardError(f"chunk id {chunk} occurs twice in a minishard index", key=key)
    return MinishardIndex(ids, starts, ends)


def find_chunks(index: MinishardIndex, chunk_ids: npt.ArrayLike) -> list[tuple[int, int] | None]:
    """Absolute ``[start, end)`` of each of ``chunk_ids`` in a decoded minishard index
    (``None`` for ids it does not hold): one vectorised search for the batch."""
    wanted = as_uint64_array(chunk_ids)
    if index.ids.size == 0:
        return [None] * wanted.size
    pos = np.minimum(np.searchsorted(index.ids, wanted), index.ids.size - 1)
    found = (index.ids[pos] == wanted).tolist()
    starts, ends = index.starts[pos].tolist(), index.ends[pos].tolist()
    return [(a, b) if ok else None for ok, a, b in zip(found, starts, ends, strict=True)]


def check_placement(
    index: MinishardIndex, spec: ShardingSpec, shard: int, minishard: int, *, key: str | None = None
) -> None:
    """``CorruptShardError`` unless every id of a minishard index hashes to this shard and
    minishard: a misplaced chunk could never be found by a reader."""
    shards, minis = spec.shard_and_minishard(index.ids)
    bad = (shards != np.uint64(shard)) | (minis != np.uint64(minishard))
    if bool(bad.any()):
        i = int(np.argmax(bad))
        raise CorruptShardError(
            f"chunk id {int(index.ids[i])} is stored in minishard {minishard} but belongs to "
            f"shard {int(shards[i])} minishard {int(minis[i])}",
            key=key,
        )


def split_shard(
    shard: BytesLike, spec: ShardingSpec, shard_number: int, *, key: str | None = None
) -> dict[int, memoryview]:
    """Every chunk of a whole shard file, still encoded, as zero-copy slices.

    Validates the shard index, each minishard index and the placement of every id
    (:func:`check_placement`); ``CorruptShardError`` naming ``key`` otherwise.
    """
    view = memoryview(shard)
    nbytes = shard_index_nbytes(spec)
    table = decode_shard_index(view[:nbytes], spec, key=key, shard_size=len(view))
    chunks: dict[int, memoryview] = {}
    for minishard in np.flatnonzero(table[:, 0] != table[:, 1]).tolist():
        start, end = minishard_index_range(table, minishard)
        mini = decode_minishard_index(view[start:end], spec, key=key, shard_size=len(view))
        check_placement(mini, spec, shard_number, minishard, key=key)
        for chunk_id, a, b in zip(
            mini.ids.tolist(), mini.starts.tolist(), mini.ends.tolist(), strict=True
        ):
            chunks[chunk_id] = view[a:b]
    return chunks


def inspect_shard(
    shard: BytesLike, spec: ShardingSpec, shard_number: int, *, key: str | None = None
) -> ShardHealth[int]:
    """What a whole shard file still holds (see :mod:`~asyncshard.formats.health`).

    A shard index that does not decode loses every chunk; a minishard index that lies
    past the end or does not decode loses the chunks it names (a fault: which ones is
    unknown). Otherwise each chunk is lost alone when it belongs to another shard or
    minishard, its bytes lie past the end of the shard, or they partly overlap another
    chunk's. Chunk data is not decoded here (``decode_chunk_data`` does that).
    """
    view = memoryview(shard)
    size = len(view)
    nbytes = shard_index_nbytes(spec)
    health: ShardHealth[int] = ShardHealth()
    try:
        if size < nbytes:
            raise CorruptShardError(f"shard has {size} bytes, less than its {nbytes}-byte index")
        table = decode_shard_index(view[:nbytes], spec, key=key)
    except FormatError as exc:
        health.faults.append(f"shard index: {exc}")
        return health
    spans: list[tuple[int, int, int]] = []
    for minishard in np.flatnonzero(table[:, 0] != table[:, 1]).tolist():
        start, end = minishard_index_range(table, minishard)
        try:
            if end > size:
                raise CorruptShardError(f"bytes [{start}, {end}) lie past the end ({size})")
            mini = decode_minishard_index(view[start:end], spec, key=key)
        except FormatError as exc:
            health.faults.append(f"minishard {minishard} index: {exc}")
            continue
        shards, minis = spec.shard_and_minishard(mini.ids)
        rows = zip(
            mini.ids.tolist(),
            mini.starts.tolist(),
            mini.ends.tolist(),
            shards.tolist(),
            minis.tolist(),
            strict=True,
        )
        for chunk_id, a, b, s, m in rows:
            if (s, m) != (shard_number, minishard):
                health.lost[chunk_id] = f"belongs to shard {s} minishard {m}, not {minishard}"
            elif b > size:
                health.lost[chunk_id] = (
                    f"bytes [{a}, {b}) lie past the end of the {size}-byte shard"
                )
            else:
                spans.append((a, b, chunk_id))
                health.intact[chunk_id] = view[a:b]
    for chunk_id, reason in overlapping(spans).items():
        del health.intact[chunk_id]
        health.lost[chunk_id] = reason
    return health


def encode_minishard_index(
    ids: npt.ArrayLike, starts: npt.ArrayLike, ends: npt.ArrayLike, spec: ShardingSpec
) -> bytes:
    """Encode (and gzip, if so configured) a minishard index from absolute byte ranges.

    Entries are written in the order given; ranges must lie after the shard index.
    """
    id_arr = as_uint64_array(ids)
    start_arr = as_uint64_array(starts, "starts")
    end_arr = as_uint64_array(ends, "ends")
    if not id_arr.ndim == start_arr.ndim == end_arr.ndim == 1:
        raise ValueError("ids, starts and ends must be 1-d")
    if not id_arr.size == start_arr.size == end_arr.size:
        raise ValueError("ids, starts and ends must have the same length")
    base = shard_index_nbytes(spec)
    if bool((start_arr < base).any()) or bool((end_arr < start_arr).any()):
        raise ValueError("chunk byte ranges must satisfy shard_index_nbytes <= start <= end")
    rel_starts = start_arr - np.uint64(base)
    rel_ends = end_arr - np.uint64(base)
    table = np.empty((3, id_arr.size), dtype=np.uint64)
    table[0] = np.diff(id_arr, prepend=np.uint64(0))  # wraps for unsorted ids, as it must
    prev_ends = np.concatenate([np.zeros(1, dtype=np.uint64), rel_ends[:-1]])
    table[1] = rel_starts - prev_ends  # wraps for chunks placed out of order, as it must
    table[2] = rel_ends - rel_starts
    raw = table.astype(_LE_U64).tobytes()
    return _gzip(raw) if spec.minishard_index_encoding == "gzip" else raw


# --------------------------------------------------------------------------- chunk data


def decode_chunk_data(
    buf: BytesLike,
    spec: ShardingSpec,
    *,
    key: str | None = None,
    max_nbytes: int = DEFAULT_MAX_CHUNK_NBYTES,
) -> bytes:
    """A chunk's raw bytes: ``buf`` itself, or bounded-gunzipped when ``data_encoding`` is gzip."""
    out = _decode(buf, spec.data_encoding, max_nbytes, key)
    return out if isinstance(out, bytes) else bytes(out)


def encode_chunk_data(raw: BytesLike, spec: ShardingSpec) -> BytesLike:
    """A chunk's stored bytes: ``raw`` itself, or gzipped when ``data_encoding`` is gzip."""
    return _gzip(raw) if spec.data_encoding == "gzip" else raw


# --------------------------------------------------------------------------- shard building


def _minishards_of_one_shard(chunk_ids: U64Array, spec: ShardingSpec) -> U64Array:
    """Minishard of each id; ``ValueError`` unless all ids map to the same shard."""
    shards, minishards = spec.shard_and_minishard(chunk_ids)
    if shards.size and bool((shards != shards[0]).any()):
        found = np.unique(shards)[:8].tolist()
        raise ValueError(f"chunk ids belong to several shards ({found}...), not one")
    return minishards


def build_shard(chunks: Mapping[int, BytesLike], spec: ShardingSpec) -> bytes:
    """A complete shard file from ``{chunk_id: raw bytes}``; all ids must share one shard.

    Layout (as tensorstore writes it): the shard index, then per minishard in order the
    chunk data sorted by id (gzip when ``data_encoding`` is gzip) followed by its minishard
    index. Empty minishards get an empty ``[0, 0)`` entry. ``ValueError`` for ids of
    several shards.
    """
    chunk_ids = as_uint64_array(list(chunks.keys()))
    minishards = _minishards_of_one_shard(chunk_ids, spec)
    order = np.lexsort((chunk_ids, minishards))
    base = shard_index_nbytes(spec)
    shard_index = np.zeros((spec.num_minishards, 2), dtype=np.uint64)
    parts: list[BytesLike] = []
    pos = base
    for minishard, members in _group_runs(minishards[order], order):
        ids = chunk_ids[members]
        starts, ends, pos = _append_chunks(parts, chunks, ids, pos, spec)
        index = encode_minishard_index(ids, starts, ends, spec)
        parts.append(index)
        shard_index[minishard] = (pos - base, pos - base + len(index))
        pos += len(index)
    return b"".join([encode_shard_index(shard_index), *parts])


def _group_runs(
    sorted_keys: U64Array, order: npt.NDArray[np.intp]
) -> list[tuple[int, npt.NDArray[np.intp]]]:
    """(key, indices) for each run of equal keys in ``sorted_keys``."""
    if sorted_keys.size == 0:
        return []
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    return [(int(sorted_keys[g[0]]), order[g]) for g in np.split(np.arange(order.size), cuts)]


def _append_chunks(
    parts: list[BytesLike],
    chunks: Mapping[int, BytesLike],
    ids: U64Array,
    pos: int,
    spec: ShardingSpec,
) -> tuple[list[int], list[int], int]:
    starts: list[int] = []
    ends: list[int] = []
    for chunk_id in ids.tolist():
        encoded = encode_chunk_data(chunks[chunk_id], spec)
        parts.append(encoded)
        starts.append(pos)
        pos += memoryview(encoded).nbytes
        ends.append(pos)
    return starts, ends, pos


def build_shards(chunks: Mapping[int, BytesLike], spec: ShardingSpec) -> dict[str, bytes]:
    """``{shard file name: shard bytes}`` for every shard that holds one of ``chunks``."""
    chunk_ids = as_uint64_array(list(chunks.keys()))
    shards, _ = spec.shard_and_minishard(chunk_ids)
    ids = chunk_ids.tolist()
    grouped: dict[int, dict[int, BytesLike]] = {}
    for chunk_id, shard in zip(ids, shards.tolist(), strict=True):
        grouped.setdefault(shard, {})[chunk_id] = chunks[chunk_id]
    return {
        spec.shard_filename(shard): build_shard(members, spec)
        for shard, members in sorted(grouped.items())
    }
