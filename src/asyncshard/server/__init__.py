"""The asyncshard server: any Store served over HTTP to web viewers (``asyncshard serve``)."""

from asyncshard.server.app import DEFAULT_CACHE_CONTROL, PIECE_SIZE, make_app

__all__ = ["DEFAULT_CACHE_CONTROL", "PIECE_SIZE", "make_app"]
