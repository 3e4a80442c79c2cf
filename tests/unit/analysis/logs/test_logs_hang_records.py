"""Hang records that ``ncclcheck run`` wrote, read back by ``logs RUN_DIR``: who ended the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncclcheck.analysis.logs.verdict import with_hangs
from ncclcheck.collectors import hang_records
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport

TERMINATED = Finding(
    "launcher-terminated", "error", "torchrun (pid 7) was ended from outside by signal 15 (scancel, a time limit)"
)


def record(tmp_path: Path, ended: bool | None) -> Path:
    hangs = tmp_path / "hangs"
    hangs.mkdir()
    finding = {"kind": "straggler", "severity": "error", "ranks": [0, 1], "culprits": [1], "message": "rank 1 sleeps"}
    data = {"schema": "ncclcheck.watch/2", "time": 5.0, "findings": [finding], "ranks": []}
    if ended is not None:
        data["ended_job"] = ended
    (hangs / "hang-1.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("ended", [True, False, None])
def test_a_job_run_ended_on_a_hang_is_not_said_to_be_ended_from_outside(tmp_path: Path, ended: bool | None) -> None:
    """``--on-hang exit``: the record says ncclcheck ended the job, so torchrun's "got signal 15" becomes one info
    finding saying who did; a record without it (``--on-hang watch``, or a run before the key) keeps the launcher's
    words: someone outside ended it."""
    hangs = hang_records.find([str(record(tmp_path, ended))])
    assert [h.ended_job for h in hangs] == [ended is True]
    report = with_hangs(LogReport((TERMINATED,), (), (), (), TERMINATED, 10), hangs)
    ids = [f.id for f in report.findings]
    assert ids.count("hang-recorded") == 1 and report.root_cause is not None
    assert report.root_cause.id == "hang-recorded"
    if ended:
        assert "ended-by-ncclcheck" in ids and "launcher-terminated" not in ids
        assert not any("from outside" in f.message for f in report.findings)
    else:
        assert "launcher-terminated" in ids and "ended-by-ncclcheck" not in ids
