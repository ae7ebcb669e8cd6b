"""Views of a store: sharded datasets presented unsharded (:class:`UnshardedView`)."""

from asyncshard.views.unsharded import UnshardedView

__all__ = ["UnshardedView"]
