"""``ncclcheck logs`` on pasted stack dumps, end to end as a user runs it: exit codes, JSON and words."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES

SHARED = FIXTURES / "pyspy_dumps"


REAL = FIXTURES / "pyspy_text"


def run_logs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", *args], capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.integration
def test_logs_on_pastes_end_to_end_exit_codes_json_and_words() -> None:
    named = run_logs(str(REAL / "dl-stuck.txt"), "--json")
    report = json.loads(named.stdout)
    assert named.returncode == 1 and report["schema"] == "ncclcheck.logs/2"
    assert report["verdict"]["root_cause"] == "stacks-straggler"
    assert [s["place"] for s in report["stacks"]] == ["collective", "dataloader"]
    assert report["stacks"][1]["pid"] == 11221 and report["stacks"][1]["line"] == 26
    open_ = run_logs(str(next(SHARED.glob("S02_*.txt"))))
    assert open_.returncode == 4 and "single out no culprit" in open_.stdout and "✓" not in open_.stdout
    assert "backward" in open_.stdout and open_.stderr == ""
