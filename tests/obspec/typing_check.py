"""Type-checked by ``test_typing.py`` (``mypy --strict``), never imported: what a static
type checker must accept of the obspec adapters."""

from __future__ import annotations

import obspec
import obstore.store

from asyncshard.backends import MemoryStore
from asyncshard.obspec import from_obspec, to_obspec
from asyncshard.store import Store

client = to_obspec(MemoryStore())
get: obspec.GetAsync = client
get_range: obspec.GetRangeAsync = client
get_ranges: obspec.GetRangesAsync = client
head: obspec.HeadAsync = client
put: obspec.PutAsync = client
delete: obspec.DeleteAsync = client
listing: obspec.ListAsync = client
listing_dirs: obspec.ListWithDelimiterAsync = client
copy: obspec.CopyAsync = client
rename: obspec.RenameAsync = client
get_sync: obspec.Get = client
get_range_sync: obspec.GetRange = client
get_ranges_sync: obspec.GetRanges = client
head_sync: obspec.Head = client
put_sync: obspec.Put = client
delete_sync: obspec.Delete = client
list_sync: obspec.List = client
list_dirs_sync: obspec.ListWithDelimiter = client
copy_sync: obspec.Copy = client
rename_sync: obspec.Rename = client

store: Store = from_obspec(obstore.store.MemoryStore())
round_trip: Store = from_obspec(client)


async def read(reader: obspec.GetAsync) -> bytes:
    result: obspec.GetResultAsync = await reader.get_async("key")
    return bytes(await result.buffer_async())
