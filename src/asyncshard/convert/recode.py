"""Re-encoding Zarr v2 chunks whose codecs have no v3 equivalent, one chunk at a time.

A chunk is decoded through its v2 compressor and filters (numcodecs, which zarr-python
brings), laid out in C order and little endian, and encoded with
:data:`~asyncshard.formats.zarr2.RECODED_CODECS` (``bytes`` + ``zstd``). Memory is one
chunk, decoded, per chunk in flight.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from asyncshard.buffers import BytesLike
from asyncshard.errors import ConversionError
from asyncshard.formats.zarr2 import RECODED_CODECS

__all__ = ["recoder"]


def _numcodecs() -> Any:
    try:
        return importlib.import_module("numcodecs")  # untyped: used through Any
    except ImportError:
        raise ConversionError(
            "re-encoding Zarr v2 chunks needs numcodecs: pip install 'asyncshard[zarr]'"
        ) from None


def recoder(recode: Mapping[str, Any]) -> Callable[[BytesLike], bytes]:
    """A function from a stored v2 chunk to the same chunk in the recoded v3 codecs;
    ``recode`` is :attr:`~asyncshard.formats.zarr2.V2Translation.recode`."""
    numcodecs = _numcodecs()
    compressor = None if recode["compressor"] is None else numcodecs.get_codec(recode["compressor"])
    filters = [numcodecs.get_codec(dict(f)) for f in recode["filters"]]
    dtype = np.dtype(recode["dtype"])
    chunks = tuple(recode["chunks"])
    order = recode["order"]
    level = RECODED_CODECS[1]["configuration"]["level"]
    zstd = numcodecs.Zstd(level=level)
    ensure = importlib.import_module("numcodecs.compat").ensure_contiguous_ndarray

    def recode_chunk(data: BytesLike) -> bytes:
        buf: Any = compressor.decode(data) if compressor is not None else data
        for f in reversed(filters):
            buf = f.decode(buf)
        flat = np.frombuffer(ensure(buf), dtype=np.uint8)
        array = flat.view(dtype).reshape(chunks, order=order)
        little = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<"))
        return bytes(zstd.encode(little.tobytes()))

    return recode_chunk
