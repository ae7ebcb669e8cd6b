"""The asyncshard server: any Store served over HTTP to web viewers (``asyncshard serve``)."""

from asyncshard.server.app import make_app
from asyncshard.server.config import DEFAULT_CACHE_CONTROL, PIECE_SIZE, AppConfig

__all__ = ["DEFAULT_CACHE_CONTROL", "PIECE_SIZE", "AppConfig", "make_app"]
