"""``ncclcheck logs --events``: each line as the reader read it (emitter, severity, rank), streamed; the stage the
verdict is made from, shown. Real excerpts only."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from ncclcheck.cli import main

TWO_NODES = FIXTURES / "torchrun" / "two_nodes" / "node1.log"
(M01,) = (FIXTURES / "nccl_logs_more").glob("M01_*.log")
(M32,) = (FIXTURES / "nccl_logs_more").glob("M32_*.log")


def test_the_error_events_of_a_failed_job_name_their_emitters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--events", "--severity", "error", str(TWO_NODES)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(":14 error   python rank 3: RuntimeError: rank 3 gives up" in line for line in out), out
    assert any(":16 error   glog: E1124 15:23:15.686000" in line for line in out), out
    assert any("torchelastic:   exitcode  : 1 (pid: 20062)" in line for line in out), out
    assert not any(" info " in line or "warning " in line for line in out)


def test_json_lines_start_with_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--events", "--json", str(M32)]) == 0
    first, *rest = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first == {"schema": "ncclcheck.events/1", "files": [str(M32)], "least": "warning"}
    # one kernel message over three lines, each read with the message's severity (dmesg's stamp is its time)
    assert [(e["line"], e["emitter"], e["severity"]) for e in rest[:3]] == [(n, "kernel", "error") for n in (1, 2, 3)]
    assert rest[0]["time"] == "1843.308145"


def test_a_healthy_log_has_no_error_event(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--events", "--severity", "error", str(M01)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["logs", "--events", "--severity", "all", "--json", str(M01)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()[1:]]
    assert len(events) == len([x for x in M01.read_text().splitlines() if x.strip()])
    assert {e["emitter"] for e in events} == {"nccl"} and {e["severity"] for e in events} == {"info"}


def test_a_missing_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--events", "/nonexistent/x.log"]) == 2
    assert "ncclcheck logs:" in capsys.readouterr().err


def test_severity_without_events_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--severity", "error", str(M01)]) == 2
    err = capsys.readouterr().err
    assert "--severity lists events: give --events with it" in err and err.count("\n") == 1
