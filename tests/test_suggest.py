"""A misspelt option is refused naming the nearest valid one, as misspelt flags are."""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncshard import UnknownOptionError, open_store
from asyncshard.suggest import did_you_mean


def test_the_nearest_name_is_suggested_and_nothing_far() -> None:
    assert did_you_mean("endpont", ["endpoint", "region"]) == " (did you mean 'endpoint'?)"
    assert did_you_mean("zzz", ["endpoint", "region"]) == ""


@pytest.mark.parametrize(
    ("option", "suggested"),
    [
        ("endpont", "endpoint"),  # obstore's
        ("acces_key_id", "access_key_id"),
        ("max_concurency", "max_concurrency"),  # asyncshard's own
    ],
)
def test_a_misspelt_cloud_option_names_the_valid_one(option: str, suggested: str) -> None:
    with pytest.raises(UnknownOptionError, match=rf"did you mean '{suggested}'\?"):
        open_store("s3://bucket/x", **{option: "1"})


def test_a_misspelt_local_option_names_the_valid_one(tmp_path: Path) -> None:
    with pytest.raises(UnknownOptionError, match=r"did you mean 'max_gap'\?"):
        open_store(str(tmp_path), max_gapp=3)
