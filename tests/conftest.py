from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SYSFS = SHARED / "fixtures" / "sysfs"
SCENARIOS = ("scenario1_ib_roce_down", "scenario2_roce_ipv6_ib_init_container")


def scenario(name: str) -> Path:
    path = SYSFS / name
    if not path.is_dir():
        pytest.skip(f"shared fixtures not found at {path} (clone the project next to shared/)")
    return path


def expected(name: str) -> dict[str, Any]:
    with open(scenario(name) / "expected.json", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
