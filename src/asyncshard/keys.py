"""Keys: validation, listing prefixes and folder splitting (the same on every store)."""

from __future__ import annotations

from collections.abc import Iterable

from asyncshard.errors import InvalidKeyError


def validate_key(key: str) -> str:
    """Return ``key`` if it is a clean relative path, else raise ``InvalidKeyError``."""
    if (  # the common case, in a few substring scans; the checks below name the fault
        type(key) is str
        and key
        and key[0] not in "/."
        and key[-1] != "/"
        and "//" not in key
        and "/." not in key
        and "\\" not in key
        and "\x00" not in key
    ):
        return key
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"invalid key {key!r}: keys are non-empty strings")
    if "\\" in key or "\x00" in key:
        raise InvalidKeyError(f"invalid key {key!r}: backslashes and NUL are not allowed")
    if key.startswith("/"):
        raise InvalidKeyError(f"invalid key {key!r}: keys are relative (no leading '/')")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKeyError(
                f"invalid key {key!r}: empty, '.' and '..' path segments are not allowed"
            )
    return key


def validate_prefix(prefix: str) -> str:
    """Validate a listing prefix; return it normalised (``"/"`` becomes ``""``)."""
    if prefix in ("", "/"):
        return ""
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def dir_prefix(prefix: str) -> str:
    """Normalise a ``list_dir`` argument to ``""`` or a prefix ending in ``/``."""
    prefix = validate_prefix(prefix)
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def split_dir(
    prefix: str, keys: Iterable[str], prefixes: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """``(keys, child prefixes)`` directly in the folder ``prefix`` (``""`` or ending in
    ``/``) from keys below it: deeper keys become their child prefix. ``prefixes`` are
    child prefixes known already. Both sorted, without duplicates."""
    direct: set[str] = set()
    children = set(prefixes)
    for key in keys:
        head, sep, _ = key[len(prefix) :].partition("/")
        if sep:
            children.add(prefix + head + "/")
        else:
            direct.add(key)
    return sorted(direct), sorted(children)
