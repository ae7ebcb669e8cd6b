"""Pure format code: bytes and numpy in, bytes and numpy out; nothing here does I/O.

* :mod:`.zarr3`: Zarr v3 ``sharding_indexed`` shards and array metadata;
* :mod:`.precomputed`: Neuroglancer ``neuroglancer_uint64_sharded_v1`` and volumes;
* :mod:`.morton`: Morton (Z-order) codes, shared by both;
* :mod:`.jsondoc`: metadata JSON from untrusted bytes.
"""

from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.formats.morton import morton_code, morton_codes, morton_order

__all__ = ["morton_code", "morton_codes", "morton_order", "parse_json_object"]
