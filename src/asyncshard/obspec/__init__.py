"""obspec both ways: any asyncshard Store as an obspec client, any obspec client as a Store.

`obspec <https://developmentseed.org/obspec/>`_ is the set of ``Protocol`` classes for
object-store verbs that obstore implements and that obspec-utils, VirtualiZarr and others
consume.

- :func:`to_obspec` gives an object satisfying obspec's async protocols (``GetAsync``,
  ``GetRangeAsync``, ``GetRangesAsync``, ``HeadAsync``, ``PutAsync``, ``DeleteAsync``,
  ``ListAsync``, ``ListWithDelimiterAsync``, ``CopyAsync``, ``RenameAsync``) and their
  synchronous twins (run on a background event loop) over any Store, sharded views
  included: ``get_ranges_async`` is one coalesced
  ``get_partial_values``, so an obspec reader of inner chunks goes through the shard-index
  cache and the batching.
- :func:`from_obspec` wraps an obspec client as a Store (conditional writes map onto
  ``mode="create"`` and ``UpdateVersion``); every answer is checked against what was
  asked (:mod:`asyncshard.answers`): never other bytes than those asked.

Errors follow obspec: a missing object raises :class:`obspec.exceptions.NotFoundError`
(a ``FileNotFoundError``), a failed ``if_match`` or update
:class:`~obspec.exceptions.PreconditionError`, ``mode="create"`` on an existing object
:class:`~obspec.exceptions.AlreadyExistsError`, and what cannot be honoured (tags,
attributes, version reads) :class:`~obspec.exceptions.NotSupportedError` rather than being
dropped.
"""

from asyncshard.obspec.as_client import StoreAsObspec, to_obspec
from asyncshard.obspec.client_store import ObspecClientStore, from_obspec, is_obspec_client

__all__ = ["ObspecClientStore", "StoreAsObspec", "from_obspec", "is_obspec_client", "to_obspec"]
