"""scripts/test-matrix: the floors end pins every dependency at the lower bound that
pyproject.toml declares, read from pyproject.toml itself."""

from __future__ import annotations

import runpy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
MATRIX = runpy.run_path(str(ROOT / "scripts" / "test-matrix"), run_name="test_matrix")
PROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def floors_end() -> Any:
    (end,) = [end for end in MATRIX["ends"]() if end.name == "floors"]
    return end


def test_every_supported_requirement_is_pinned_at_its_declared_lower_bound() -> None:
    """packaging reads each requirement independently of the script's parser."""
    optional = PROJECT["optional-dependencies"]
    declared = [*PROJECT["dependencies"]]
    declared += [req for extra, reqs in optional.items() if extra != "test" for req in reqs]
    pins = floors_end().pins
    assert len(pins) == len(declared), pins
    for text, pin_text in zip(declared, pins, strict=True):
        requirement, pin = Requirement(text), Requirement(pin_text)
        lower = [s.version for s in requirement.specifier if s.operator in (">=", "~=", "==")]
        assert len(lower) == 1, text
        assert canonicalize_name(pin.name) == canonicalize_name(requirement.name)
        assert [(s.operator, s.version) for s in pin.specifier] == [("==", lower[0])]
        assert str(pin.marker) == str(requirement.marker)
        assert not pin.extras  # pip refuses extras in a constraints file
    pinned = {canonicalize_name(Requirement(pin).name) for pin in pins}
    assert {"obstore", "aiohttp", "numpy", "zarr", "dask", "uvloop"} <= pinned
    assert not pinned & {"pytest", "xarray", "tensorstore"}  # test tools: newest that fits


def test_the_floors_end_runs_the_oldest_python_supported() -> None:
    assert PROJECT["requires-python"] == f">={floors_end().wanted[0]}"


@pytest.mark.parametrize(
    ("requirement", "pin"),
    [
        ("obstore>=0.7", "obstore==0.7"),
        ("dask[distributed] >= 2024.1 , <2030", "dask==2024.1"),
        ("Foo_Bar~=1.4.2", "Foo_Bar==1.4.2"),
        ("uvloop>=0.21; sys_platform != 'win32'", "uvloop==0.21; sys_platform != 'win32'"),
    ],
)
def test_floor_pin(requirement: str, pin: str) -> None:
    assert MATRIX["floor_pin"](requirement) == pin


@pytest.mark.parametrize(
    "requirement",
    ["obstore", "obstore>0.6", "obstore<1", "obstore>=0.6,>=0.7", "obstore @ https://x/y.whl"],
)
def test_a_requirement_without_one_lower_bound_is_refused(requirement: str) -> None:
    with pytest.raises(ValueError, match=r"lower bound|cannot read"):
        MATRIX["floor_pin"](requirement)


def test_only_the_test_extra_goes_unpinned() -> None:
    project = {
        "dependencies": ["a>=1"],
        "optional-dependencies": {"test": ["pytest"], "extra": ["b>=2; os_name == 'posix'"]},
    }
    assert MATRIX["floor_pins"](project) == ["a==1", "b==2; os_name == 'posix'"]
    project["dependencies"] = ["a"]
    with pytest.raises(ValueError, match="no lower bound"):
        MATRIX["floor_pins"](project)


def test_the_readme_names_every_end() -> None:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for end in MATRIX["ends"]():
        assert f"`{end.name}`" in quick_start, end.name


def test_end_options_are_taken_out_of_the_pytest_arguments() -> None:
    args = ["--end", "floors", "-k", "cloud", "--end=newest", "-x"]
    assert MATRIX["chosen_ends"](args) == (["floors", "newest"], ["-k", "cloud", "-x"])
    assert MATRIX["chosen_ends"](["-n", "0"]) == ([], ["-n", "0"])
