"""The one table of cloud URL schemes (no I/O imports: read by ``open_store`` and
``CloudStore`` alike, so both accept exactly the same URLs)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["CLOUD_SCHEMES"]

#: scheme -> the obstore backend it names
CLOUD_SCHEMES: Mapping[str, str] = MappingProxyType(
    {
        "s3": "s3",
        "s3a": "s3",
        "gs": "gs",
        "gcs": "gs",
        "http": "http",
        "https": "http",
        "az": "az",
        "azure": "az",
        "abfs": "az",
        "abfss": "az",
        "adl": "az",
    }
)
