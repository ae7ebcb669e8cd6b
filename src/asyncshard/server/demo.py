"""``asyncshard serve --demo``: a small synthetic volume, sharded two ways, and a viewer link.

:func:`write_demo` writes the same 256 x 256 x 128 uint8 volume (a gyroid in a sphere,
8 MiB) as

* ``demo.zarr/``: a Zarr v3 array (``z, y, x``) with ``sharding_indexed``: 32^3 inner
  chunks (bytes + gzip), 64 x 128 x 128 shards, so 8 shards of 32 chunks each;
* ``demo.precomputed/``: a Neuroglancer precomputed volume whose one scale ``8_8_8`` is
  sharded (``neuroglancer_uint64_sharded_v1``, identity hash, 8 shards of 4 minishards,
  gzip data and minishard indexes), 32^3 raw chunks;

both 8 nm isotropic. :func:`neuroglancer_state` and :func:`neuroglancer_url` make a
viewer state showing the two side by side.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from asyncshard.backends.local import LocalStore
from asyncshard.formats.precomputed.shard import build_shards
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import VolumeInfo
from asyncshard.formats.zarr3.metadata import parse_zarr3_array
from asyncshard.sharding.zarr import ZarrShardedStore

#: Volume shape in ``z, y, x`` order (the Zarr array's shape).
SHAPE_ZYX = (128, 256, 256)
CHUNK = 32
SHARD_ZYX = (64, 128, 128)
RESOLUTION_NM = 8
ZARR_PATH = "demo.zarr"
PRECOMPUTED_PATH = "demo.precomputed"
SCALE_KEY = f"{RESOLUTION_NM}_{RESOLUTION_NM}_{RESOLUTION_NM}"
#: The public Neuroglancer the printed link opens (in the user's own browser).
PUBLIC_NEUROGLANCER = "https://neuroglancer-demo.appspot.com/"
ZARR_LAYER = "zarr3"
PRECOMPUTED_LAYER = "precomputed"


def demo_volume(shape_zyx: tuple[int, int, int] = SHAPE_ZYX) -> npt.NDArray[np.uint8]:
    """A deterministic uint8 volume: a gyroid, brighter towards a ball's centre."""
    z, y, x = (np.arange(n, dtype=np.float32) for n in shape_zyx)
    z, y, x = z[:, None, None], y[None, :, None], x[None, None, :]
    period = np.float32(2 * np.pi / 48)
    gyroid = (
        np.sin(x * period) * np.cos(y * period)
        + np.sin(y * period) * np.cos(z * period)
        + np.sin(z * period) * np.cos(x * period)
    )
    centre = [(n - 1) / 2 for n in shape_zyx]
    radius = min(shape_zyx) * 0.9
    r2 = ((z - centre[0]) ** 2 + (y - centre[1]) ** 2) / radius**2 + (
        x - centre[2]
    ) ** 2 / radius**2
    falloff = np.clip(1.2 - r2, 0.15, 1.0)
    sheet = np.exp(-4 * gyroid**2)
    value = 25 + 220 * sheet * falloff
    out: npt.NDArray[np.uint8] = value.astype(np.uint8)
    return out


def zarr_metadata(shape_zyx: tuple[int, int, int] = SHAPE_ZYX) -> dict[str, Any]:
    """The demo array's ``zarr.json``."""
    unit = f"{RESOLUTION_NM} nm"
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape_zyx),
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(SHARD_ZYX)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [CHUNK, CHUNK, CHUNK],
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "gzip", "configuration": {"level": 1}},
                    ],
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ],
        "dimension_names": ["z", "y", "x"],
        "attributes": {"dimension_units": [unit, unit, unit]},
    }


def precomputed_sharding() -> ShardingSpec:
    """Identity hash of ``chunk_id >> 3``: 8 shards of 4 minishards of 8 chunks."""
    return ShardingSpec.from_json(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 3,
            "hash": "identity",
            "minishard_bits": 2,
            "shard_bits": 3,
            "minishard_index_encoding": "gzip",
            "data_encoding": "gzip",
        }
    )


def precomputed_info(shape_zyx: tuple[int, int, int] = SHAPE_ZYX) -> dict[str, Any]:
    """The demo volume's ``info``."""
    r = RESOLUTION_NM
    return {
        "@type": "neuroglancer_multiscale_volume",
        "type": "image",
        "data_type": "uint8",
        "num_channels": 1,
        "scales": [
            {
                "key": SCALE_KEY,
                "size": list(reversed(shape_zyx)),
                "resolution": [r, r, r],
                "voxel_offset": [0, 0, 0],
                "chunk_sizes": [[CHUNK, CHUNK, CHUNK]],
                "encoding": "raw",
                "sharding": precomputed_sharding().to_json(),
            }
        ],
    }


def _zarr_chunks(volume: npt.NDArray[np.uint8]) -> dict[str, bytes]:
    chunks: dict[str, bytes] = {}
    nz, ny, nx = (n // CHUNK for n in volume.shape)
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                block = volume[
                    k * CHUNK : (k + 1) * CHUNK,
                    j * CHUNK : (j + 1) * CHUNK,
                    i * CHUNK : (i + 1) * CHUNK,
                ]
                raw = np.ascontiguousarray(block).tobytes()
                chunks[f"{ZARR_PATH}/c/{k}/{j}/{i}"] = gzip.compress(raw, 1, mtime=0)
    return chunks


def _precomputed_chunks(volume: npt.NDArray[np.uint8], info: VolumeInfo) -> dict[int, bytes]:
    scale = info.scale(SCALE_KEY)
    chunks: dict[int, bytes] = {}
    gx, gy, gz = scale.grid_shape
    for k in range(gz):
        for j in range(gy):
            for i in range(gx):
                (x0, y0, z0), (x1, y1, z1) = scale.chunk_bounds((i, j, k))
                block = volume[z0:z1, y0:y1, x0:x1]  # x fastest: precomputed raw order
                chunks[scale.chunk_id((i, j, k))] = np.ascontiguousarray(block).tobytes()
    return chunks


async def write_demo(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Write the demo volume into ``folder`` (both formats); return a short summary."""
    volume = demo_volume()
    async with LocalStore(folder, durable=False) as store:
        doc = zarr_metadata(SHAPE_ZYX)
        await store.set(f"{ZARR_PATH}/zarr.json", json.dumps(doc, indent=2).encode())
        layout = parse_zarr3_array(doc, key_prefix=f"{ZARR_PATH}/")
        sharded = ZarrShardedStore(store, layout)
        await sharded.set_values(_zarr_chunks(volume))

        info_doc = precomputed_info(SHAPE_ZYX)
        info = VolumeInfo.from_json(info_doc)
        await store.set(f"{PRECOMPUTED_PATH}/info", json.dumps(info_doc, indent=2).encode())
        shards = build_shards(_precomputed_chunks(volume, info), precomputed_sharding())
        for name, data in shards.items():
            await store.set(f"{PRECOMPUTED_PATH}/{SCALE_KEY}/{name}", data)
        zarr_shards = [k async for k in store.list_prefix(f"{ZARR_PATH}/c/")]
    return {
        "folder": str(Path(folder).resolve()),
        "shape_zyx": list(volume.shape),
        "zarr_shards": len(zarr_shards),
        "precomputed_shards": len(shards),
    }


def neuroglancer_state(base_url: str) -> dict[str, Any]:
    """A viewer state: the zarr3 layer (left) and the precomputed layer (right) of the
    demo served at ``base_url`` (``http://127.0.0.1:8000``)."""
    base = base_url.rstrip("/")
    m = RESOLUTION_NM * 1e-9
    z, y, x = SHAPE_ZYX
    return {
        "dimensions": {"x": [m, "m"], "y": [m, "m"], "z": [m, "m"]},
        "position": [x / 2, y / 2, z / 2],
        "crossSectionScale": 0.55,
        "projectionScale": 512,
        "layers": [
            {"type": "image", "source": f"zarr3://{base}/{ZARR_PATH}/", "name": ZARR_LAYER},
            {
                "type": "image",
                "source": f"precomputed://{base}/{PRECOMPUTED_PATH}",
                "name": PRECOMPUTED_LAYER,
            },
        ],
        "layout": {
            "type": "row",
            "children": [
                {"type": "viewer", "layers": [ZARR_LAYER], "layout": "xy"},
                {"type": "viewer", "layers": [PRECOMPUTED_LAYER], "layout": "xy"},
            ],
        },
    }


def neuroglancer_url(state: Mapping[str, Any], viewer: str = PUBLIC_NEUROGLANCER) -> str:
    """A Neuroglancer link opening ``state`` (``#!`` + the URL-encoded JSON)."""
    text = json.dumps(state, separators=(",", ":"))
    return viewer.rstrip("/") + "/#!" + quote(text, safe="~@$&()*!+=:;,.?/'")
