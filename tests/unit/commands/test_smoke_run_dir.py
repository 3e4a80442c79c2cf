"""smoke's log directory: each run its own, even when two start in the same second."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ncclcheck.commands.smoke.settings import run_dir


def test_two_runs_started_in_the_same_second_get_two_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two smokes in one working directory in the same second (the README's lines run side by side did): the
    second must not write into the first's progress files."""
    monkeypatch.setattr(time, "strftime", lambda fmt: "smoke-20261128-045224")
    base = str(tmp_path / "logs")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "old").mkdir()  # a used --log-dir: each run gets a sub-directory
    one, two = run_dir(base, 0), run_dir(base, 0)
    assert one != two and Path(one).is_dir() and Path(two).is_dir()
    assert Path(one).name == "smoke-20261128-045224-node0" and Path(two).name == "smoke-20261128-045224-node0-2"


def test_a_new_or_empty_log_dir_is_used_as_it_is(tmp_path: Path) -> None:
    new = tmp_path / "fresh"
    assert run_dir(str(new), 1) == str(new)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_dir(str(empty), 1) == str(empty)
