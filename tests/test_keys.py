"""Key and prefix validation, exhaustively and with hypothesis."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.errors import InvalidKeyError
from asyncshard.store import dir_prefix, validate_key, validate_prefix

segment = st.text(
    alphabet=st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(segment, min_size=1, max_size=6))
def test_clean_paths_are_accepted(segments: list[str]) -> None:
    key = "/".join(segments)
    assert validate_key(key) == key
    assert validate_prefix(key + "/") == key + "/"


@given(st.text(max_size=40))
def test_any_text_is_accepted_only_when_clean(key: str) -> None:
    try:
        validate_key(key)
    except InvalidKeyError:
        return
    parts = key.split("/")
    assert key and not key.startswith("/") and "\\" not in key and "\x00" not in key
    assert all(p not in ("", ".", "..") for p in parts)


def _clean(key: str) -> bool:
    return (
        bool(key)
        and not key.startswith("/")
        and "\\" not in key
        and "\x00" not in key
        and all(p not in ("", ".", "..") for p in key.split("/"))
    )


def test_every_short_key_over_the_path_alphabet() -> None:
    """Every key of up to 6 characters from ``a . / \\ NUL``: accepted exactly when clean
    (the substring fast path and the segment checks agree)."""
    alphabet = "a./\\\x00"
    for key in ("".join(k) for n in range(7) for k in itertools.product(alphabet, repeat=n)):
        try:
            validate_key(key)
            accepted = True
        except InvalidKeyError:
            accepted = False
        assert accepted == _clean(key), repr(key)


@pytest.mark.parametrize(
    "key",
    ["", "/", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "../a", "a\\b", "a\x00", "..\\x"],
)
def test_hostile_keys(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(key)


def test_prefix_normalisation() -> None:
    assert validate_prefix("") == "" and validate_prefix("/") == ""
    assert validate_prefix("a/b") == "a/b" and validate_prefix("a/b/") == "a/b/"
    assert dir_prefix("a/b") == "a/b/" and dir_prefix("") == ""
    for bad in ["//", "a//", "../", "a/../", "/a/"]:
        with pytest.raises(InvalidKeyError):
            validate_prefix(bad)
