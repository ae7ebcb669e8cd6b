"""asyncshard stores as zarr-python 3 stores (``zarr.abc.store.Store``).

Needs zarr-python (``pip install "asyncshard[zarr]"``); ``import asyncshard`` alone never
imports zarr.
"""

try:
    import zarr.abc.store  # noqa: F401 - fail here, with a hint, when zarr is missing
except ImportError as exc:  # pragma: no cover - zarr is a test dependency
    raise ImportError(
        'asyncshard.zarr_python needs zarr-python 3: pip install "asyncshard[zarr]"'
    ) from exc

from asyncshard.zarr_python.modes import MODES, Mode, ShardRewriteWarning
from asyncshard.zarr_python.store import ZarrStore

__all__ = ["MODES", "Mode", "ShardRewriteWarning", "ZarrStore"]
