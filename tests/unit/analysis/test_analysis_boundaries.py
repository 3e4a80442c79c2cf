"""Each command's analysis folder keeps the pure floor's bans and adds its own (which siblings it may not import).

A nested ruff.toml whose ``banned-api`` table is its own replaces its parent's instead of adding to it: the folder
would then silently lose "analysis never touches torch" and the rest. ``extend-banned-api`` adds; only that is
allowed here. A ban must name a folder that is there (a rename would leave it guarding nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

tomllib = pytest.importorskip("tomllib")

ANALYSIS = REPO / "ncclcheck" / "analysis"
FOLDERS = sorted(p.name for p in ANALYSIS.iterdir() if (p / "__init__.py").is_file())


def _problems(folder: Path, siblings: list[str]) -> list[str]:
    path = folder / "ruff.toml"
    if not path.is_file():
        return [f"{folder.name}: no ruff.toml"]
    config: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    tidy = config.get("lint", {}).get("flake8-tidy-imports", {})
    out = [] if config.get("extend") == "../ruff.toml" else [f"{folder.name}: does not extend ../ruff.toml"]
    if "banned-api" in tidy:
        out.append(f"{folder.name}: banned-api replaces the parent's bans (use extend-banned-api)")
    for banned in tidy.get("extend-banned-api", {}):
        name = banned.removeprefix("ncclcheck.analysis.")
        if banned.startswith("ncclcheck.analysis.") and name not in siblings:
            out.append(f"{folder.name}: bans {banned}, which is no folder of analysis")
        if name == folder.name:
            out.append(f"{folder.name}: bans itself")
    return out


def test_every_command_folder_of_analysis_has_its_boundary() -> None:
    assert {"env", "flight", "logs", "run", "smoke", "watch"} <= set(FOLDERS)
    assert [p for name in FOLDERS for p in _problems(ANALYSIS / name, FOLDERS)] == []


def test_the_flight_recorder_analysis_imports_none_of_its_users() -> None:
    tidy = tomllib.loads((ANALYSIS / "flight" / "ruff.toml").read_text(encoding="utf-8"))["lint"]
    banned = set(tidy["flake8-tidy-imports"]["extend-banned-api"])
    assert {f"ncclcheck.analysis.{name}" for name in FOLDERS if name != "flight"} == banned


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "no ruff.toml"),
        ('extend = "../../pyproject.toml"\n', "does not extend ../ruff.toml"),
        (
            'extend = "../ruff.toml"\n[lint.flake8-tidy-imports.banned-api]\n"ncclcheck.analysis.logs".msg = "x"\n',
            "replaces the parent's bans",
        ),
        (
            'extend = "../ruff.toml"\n[lint.flake8-tidy-imports.extend-banned-api]\n'
            '"ncclcheck.analysis.gone".msg = "x"\n',
            "which is no folder",
        ),
        (
            'extend = "../ruff.toml"\n[lint.flake8-tidy-imports.extend-banned-api]\n"ncclcheck.analysis.new".msg = "x"\n',
            "bans itself",
        ),
    ],
    ids=["missing", "not-extending", "replacing", "stale", "itself"],
)
def test_a_folder_that_would_lose_its_bans_is_named(tmp_path: Path, text: str | None, said: str) -> None:
    folder = tmp_path / "new"
    folder.mkdir()
    if text is not None:
        (folder / "ruff.toml").write_text(text, encoding="utf-8")
    problems = _problems(folder, ["env", "logs", "new"])
    assert len(problems) == 1 and said in problems[0], problems


def test_a_folder_that_adds_to_its_parents_bans_passes(tmp_path: Path) -> None:
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "ruff.toml").write_text(
        'extend = "../ruff.toml"\n[lint.flake8-tidy-imports.extend-banned-api]\n"ncclcheck.analysis.env".msg = "x"\n',
        encoding="utf-8",
    )
    assert _problems(folder, ["env", "new"]) == []
