"""Flight Recorder dumps from real torchrun/gloo runs that diverge on purpose, and ``ncclcheck logs`` over
them as a user runs it: per-group divergence, both sides of a tie, missing and corrupt dumps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKERS

from ncclcheck.cli import main


@pytest.fixture(scope="module")
def real_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per-rank dumps (pickle and JSON) written by a 2-rank gloo job whose groups diverge in 4 ways."""
    out = tmp_path_factory.mktemp("fr")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(WORKERS / "fr_diverge.py"),
    ]
    run = subprocess.run(cmd, env={**os.environ, "FR_DIR": str(out)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def report(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["logs", "--json", *map(str, paths)])
    return code, json.loads(capsys.readouterr().out)


def by_group(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["desc"]: g for g in rep["flight_recorder"]["groups"]}


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
@pytest.mark.parametrize("kind", ["pickle", "json"])
def test_real_gloo_divergence_per_group(real_dumps: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    code, rep = report([real_dumps / kind], capsys)
    assert code == 1
    found = {(f["id"], tuple(f["ranks"]), tuple(f["culprits"])) for f in rep["findings"]}
    assert found == {  # two ranks that disagree are a tie: both listed, neither blamed
        ("fr-op-mismatch", (0, 1), ()),
        ("fr-size-mismatch", (0, 1), ()),
        ("fr-dtype-mismatch", (0, 1), ()),
        ("fr-not-joined", (0, 1), (1,)),  # rank 1 never issued #2: rank 0 waits on it
    }
    groups = by_group(rep)
    assert {d: g["first_divergent_seq"] for d, g in groups.items()} == {
        "healthy": None,
        "op": 2,
        "size": 1,
        "dtype": 1,
        "default_pg": 2,
    }
    assert groups["default_pg"]["pg_status"]["1"]["last_enqueued"] == 1  # rank 1 never issued #2
    assert groups["default_pg"]["pg_status"]["0"]["last_enqueued"] == 2
    assert rep["flight_recorder"]["missing_ranks"] == [] and rep["flight_recorder"]["world_size"] == 2
    # the op mismatch was issued first, so it is the root cause
    assert rep["verdict"]["root_cause"] == "fr-op-mismatch" and rep["verdict"]["ranks"] == [0, 1]
    assert rep["verdict"]["culprits"] == []
    op = next(f for f in rep["findings"] if f["id"] == "fr-op-mismatch")
    assert "all_reduce" in op["message"] and "broadcast" in op["message"]
    assert "the dumps cannot tell which side is wrong" in op["message"]
    if kind == "pickle":  # only pickles carry stacks: the user's line is named
        assert "fr_diverge.py:" in op["message"]


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
def test_human_report_shows_both_sides_of_a_tie(real_dumps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", str(real_dumps / "pickle")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("✗ root cause (rank 0-1): process group 2 (op), collective #2")
    source = (WORKERS / "fr_diverge.py").read_text().splitlines()
    for call in ('dist.all_reduce(t, group=groups["op"], async_op=True)', "dist.broadcast(t, 0, group=groups"):
        assert f"fr_diverge.py:{next(i for i, line in enumerate(source, 1) if call in line)}" in out, call
    assert "Flight Recorder: 2 dump(s), rank 0-1 of 2" in out and "first divergent collective #2" in out
    # gloo records no start of a collective: the table says so instead of an unexplained -1
    assert " -1 " not in out and "gloo records no start" in " ".join(out.split())


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
def test_missing_and_corrupt_dumps_analyse_the_rest(
    real_dumps: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(real_dumps / "pickle" / "rank0", tmp_path / "rank0")
    (tmp_path / "rank1").write_bytes((real_dumps / "pickle" / "rank1").read_bytes()[:100])
    code, rep = report([tmp_path], capsys)
    ids = {f["id"]: f for f in rep["findings"]}
    assert set(ids) == {"fr-dumps-missing", "fr-dump-unreadable"} and code == 0
    assert ids["fr-dumps-missing"]["ranks"] == [1]
    assert "truncated or corrupt" in ids["fr-dump-unreadable"]["message"]
    assert [d["rank"] for d in rep["flight_recorder"]["dumps"]] == [0]
