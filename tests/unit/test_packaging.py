"""The package metadata never replaces what the user's training environment already has."""

from __future__ import annotations

import re
import sys

import pytest

if sys.version_info < (3, 11):
    pytest.skip("tomllib is Python 3.11+", allow_module_level=True)
import tomllib
from conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirement(name: str, within: list[str]) -> str:
    return next(r for r in within if re.match(rf"{name}\b", r))


@pytest.mark.parametrize("name", ["torch", "textual", "psutil", "py-spy"])
def test_runtime_requirements_are_ranges_never_pins(name: str) -> None:
    """An exact pin up- or downgrades the user's torch or textual inside their training environment."""
    spec = requirement(name, PROJECT["dependencies"])
    assert "==" not in spec and ">=" in spec, spec


def test_the_exact_textual_the_snapshots_were_drawn_with_is_pinned_for_tests_only() -> None:
    assert re.fullmatch(r"textual==[0-9.]+", requirement("textual", PROJECT["optional-dependencies"]["test"]))
