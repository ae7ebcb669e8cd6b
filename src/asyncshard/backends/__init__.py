"""Storage backends: the only place where asyncshard does I/O."""

from asyncshard.backends.local import LocalStore
from asyncshard.backends.memory import MemoryStore
from asyncshard.backends.registry import open_store, register_scheme, supported_schemes

__all__ = ["LocalStore", "MemoryStore", "open_store", "register_scheme", "supported_schemes"]
