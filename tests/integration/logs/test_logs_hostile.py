"""``ncclcheck logs`` on what users really hand it: long lines, no newlines, NULs, wraps that are not wraps.

Each case must find the error it holds, never glue two lines into one, count lines as ``wc -l`` does,
and keep memory flat.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

NCCL_ERROR = (
    "node1:2211:2299 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node2<47362>"
)
TRAIN = "step {i} | loss 2.3142 | lr 3.00e-04 | grad_norm 0.731 | tokens/s 51234 | mem 41.2GiB | ok"


def logs(path: Path) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", "--json", str(path)], capture_output=True, text=True, timeout=300
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["findings"]}


@pytest.mark.integration
def test_a_line_after_a_long_training_line_is_never_glued_to_it(tmp_path: Path) -> None:
    text = "".join(TRAIN.format(i=i) + "\n" for i in range(50)) + "step ok\nerror: the loader died\n" + NCCL_ERROR
    (tmp_path / "a.log").write_text(text + "\n")
    code, report, err = logs(tmp_path / "a.log")
    assert "Traceback" not in err and report["lines"] == 53 and code == 1
    evidence = [e["text"] for f in report["findings"] for e in f["evidence"]]
    assert "peer-closed" in ids(report) or any("Connection closed" in t for t in evidence), report
    assert not any("okstep" in t or "step okerror" in t for t in evidence)


@pytest.mark.integration
def test_an_error_after_a_thousand_training_lines_is_found_and_lines_are_counted(tmp_path: Path) -> None:
    text = "".join(TRAIN.format(i=i) + "\n" for i in range(1000)) + NCCL_ERROR + "\n"
    (tmp_path / "b.log").write_text(text)
    code, report, _ = logs(tmp_path / "b.log")
    assert report["lines"] == 1001 and code == 1 and report["findings"]


@pytest.mark.integration
def test_an_error_at_the_end_of_a_line_longer_than_the_cap_is_found(tmp_path: Path) -> None:
    (tmp_path / "c.log").write_text("x" * 200_000 + " " + NCCL_ERROR.split(" ", 1)[1] + "\n")
    code, report, err = logs(tmp_path / "c.log")
    assert code == 1 and report["findings"] and "Traceback" not in err


@pytest.mark.integration
def test_no_newline_and_nul_runs_keep_memory_flat(tmp_path: Path) -> None:
    big = tmp_path / "d.log"
    with big.open("wb") as out:
        for _ in range(192):
            out.write(b"\0" * (1 << 20))  # 192 MiB of NULs, then training text, no newline anywhere
        out.write(b"loss 2.0 " * 100_000)
        out.write(b"\n" + NCCL_ERROR.encode() + b"\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    code, report, err = logs(big)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert "Traceback" not in err and code == 1 and report["findings"], err
    assert peak_mib < 150 or before / 1024 >= 150, f"peak RSS {peak_mib:.0f} MiB on a 192 MiB line"


@pytest.mark.integration
def test_ten_thousand_small_files_and_a_megabyte_line(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for i in range(10_000):
        (job / f"rank{i:05d}.log").write_text(TRAIN.format(i=i) + "\n")
    (job / "rank10000.log").write_text("y" * (1 << 20) + "\n" + NCCL_ERROR + "\n")
    code, report, err = logs(job)
    assert "Traceback" not in err and code == 1 and report["verdict"]["root_cause"] == "peer-closed"
    assert len(report["files"]) == 10_001 and report["lines"] >= 10_002
