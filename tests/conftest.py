from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # copied from ../shared/fixtures: a clone runs the whole suite alone
SYSFS = FIXTURES / "sysfs"
SCENARIOS = ("scenario1_ib_roce_down", "scenario2_roce_ipv6_ib_init_container")


def scenario(name: str) -> Path:
    path = SYSFS / name
    if not path.is_dir():
        pytest.fail(f"fixture missing: {path}")
    return path


def expected(name: str) -> dict[str, Any]:
    with open(scenario(name) / "expected.json", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
