"""The benchmarks check what they measure: missing inputs and failing commands stop them with one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO

BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import _timing  # noqa: E402
import bench_logs  # noqa: E402

pytestmark = pytest.mark.integration


def test_logs_benchmark_without_fixtures_stops_instead_of_looping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_logs, "FIXTURES", tmp_path)
    with pytest.raises(SystemExit, match="no NCCL log lines"):
        bench_logs.generate_dense(tmp_path / "dense.log", 1)
    assert not (tmp_path / "dense.log").exists()


def test_a_timed_command_that_fails_stops_the_benchmark() -> None:
    with pytest.raises(SystemExit, match="failed \\(3\\)"):
        _timing.wall([sys.executable, "-c", "import sys; sys.exit(3)"], ok=(0, 1))
    assert _timing.wall([sys.executable, "-c", "pass"], ok=(0,)) > 0
