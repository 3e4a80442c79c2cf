"""The tier is the folder (``conftest.tier_errors``): what it marks, and what it refuses, on stand-in items."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import INTEGRATION, REPO, UNIT, tier_errors


@dataclass
class Item:
    """The part of a collected test the check reads: its path, its id and its marks."""

    path: Path
    marks: list[str] = field(default_factory=list)

    @property
    def nodeid(self) -> str:
        return str(self.path.relative_to(REPO))

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def errors(*items: Item) -> list[str]:
    return tier_errors(list(items))  # type: ignore[arg-type]  # stand-ins for pytest.Item


def test_must_fire_an_integration_mark_under_unit_and_a_test_outside_both_folders() -> None:
    marked, outside = Item(UNIT / "views" / "test_x.py", ["integration"]), Item(REPO / "tests" / "test_y.py")
    found = errors(marked, outside)
    assert len(found) == 2
    assert "tests/unit/views/test_x.py: marked integration under tests/unit" in found[0]
    assert "tests/test_y.py: a test outside tests/unit and tests/integration" in found[1]


def test_must_not_a_plain_unit_test_is_left_alone_and_an_unmarked_integration_test_is_marked() -> None:
    pure, unmarked, marked = (
        Item(UNIT / "test_x.py"),
        Item(INTEGRATION / "watch" / "test_y.py"),
        Item(INTEGRATION / "env" / "test_z.py", ["integration"]),
    )
    assert errors(pure, unmarked, marked) == []
    assert pure.marks == [] and unmarked.marks == ["integration"] and marked.marks == ["integration"]
