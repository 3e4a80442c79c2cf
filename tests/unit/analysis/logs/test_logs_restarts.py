"""A job torchrun restarted and that then finished (analysis/logs/restarts.py): the errors before the restart were
survived. Must-fire: the review's job (an I/O error, a restart, the group finished) is no failure, and says what
failed before. Must-not: restarts used up (the table), an error after the group finished, a restart in one agent's
log and a finish in another's, an error with more occurrences than its evidence shows, and a healthy job with no
restart (no job-recovered finding)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASE = FIXTURES / "review_cases" / "restarts" / "restart_then_success.log"
FINISHED = "worker group successfully finished"


def read(*texts: tuple[str, str]) -> LogReport:
    lines = []
    for name, text in texts:
        lines += list(frame_all(text.splitlines(), name))
    return analyse(lines)


def test_a_job_that_finished_after_a_restart_is_no_failure_and_says_what_failed_before() -> None:
    report = read(("job.log", CASE.read_text()))
    assert report.status == "pass" and report.root_cause is None, report.findings
    first = report.findings[0]
    assert first.id == "job-recovered" and first.severity == "warning" and first.ranks == (1,), first
    assert "Input/output error" in first.message and "1 restart(s)" in first.message
    survived = {f.id: f.severity for f in report.findings}
    assert survived["python-exception"] == "warning" and survived["worker-group-restart"] == "warning"


def test_must_not_restarts_used_up_are_survived() -> None:
    """The last attempt failed too: no finish line, torchrun's table; the job failed."""
    text = CASE.read_text().split("[rank0]:resuming")[0] + (
        "E0612 10:05:00.100000 3141 torch/distributed/elastic/multiprocessing/api.py:862] failed (exitcode: 1)"
        " local_rank: 1 (pid: 3190) of binary: /usr/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-06-12_10:05:00\n  host      : node0\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 3190)\n  error_file: <N/A>\n"
        "============================================================\n"
    )
    report = read(("job.log", text))
    assert report.status == "fail" and all(f.id != "job-recovered" for f in report.findings), report.findings


def test_must_not_an_error_after_the_group_finished_is_survived() -> None:
    text = CASE.read_text() + "[rank1]:RuntimeError: CUDA error: an illegal memory access was encountered\n"
    report = read(("job.log", text))
    assert report.status == "fail" and all(f.id != "job-recovered" for f in report.findings), report.findings


def test_must_not_a_finish_in_another_agent_s_log_clears_this_one_s_errors() -> None:
    lines = CASE.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "resuming from checkpoint" in line)
    failed, finished = "\n".join(lines[:cut]), "\n".join(lines[cut:])
    report = read(("node0.log", failed), ("node1.log", finished))
    assert report.status == "fail" and all(f.id != "job-recovered" for f in report.findings), report.findings


def test_must_not_an_error_seen_more_often_than_its_evidence_keeps_is_survived() -> None:
    lines = CASE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[rank1]:OSError"))
    errors = [lines[at].replace("00017", f"{n:05d}") for n in range(6)]  # six occurrences: more than the evidence
    text = "\n".join(lines[:at] + errors + lines[at + 1 :])
    report = read(("job.log", text))
    assert report.status == "fail" and all(f.id != "job-recovered" for f in report.findings), report.findings


def test_must_not_a_healthy_job_with_no_restart_says_it_recovered() -> None:
    lines = [
        line
        for line in CASE.read_text().splitlines()
        if "[rank1]:" not in line or "loss" in line
        if "failed (exitcode" not in line and "attempts left" not in line and "closing signal" not in line
    ]
    report = read(("job.log", "\n".join(lines)))
    assert report.status == "pass" and [f.id for f in report.findings] == ["worker-group-finished"], report.findings
    assert FINISHED in report.findings[0].evidence[0].text


@pytest.mark.parametrize("top", ["train_step", "<module>"], ids=["caught-and-gone-on-from", "uncaught"])
def test_an_error_printed_before_the_group_finished_is_no_failure(top: str) -> None:
    """An exception the code went on from, or one no code caught (an earlier run's, a helper process's), printed
    before the agent saw the group finish: the job finished."""
    text = (FIXTURES / "review_cases" / "restarts" / "caught_exception_then_finished.log").read_text()
    report = read(("job.log", text.replace("in train_step", f"in {top}")))
    assert report.status == "pass" and report.root_cause is None, report.findings
    first = report.findings[0]
    assert first.id == "job-recovered" and first.ranks == (0,) and "Broken pipe" in first.message, first
    assert "restart" not in first.message  # no restart was seen: it does not say one was


def test_must_not_a_traceback_after_the_group_finished_is_survived() -> None:
    text = (FIXTURES / "review_cases" / "restarts" / "caught_exception_then_finished.log").read_text()
    lines = text.splitlines()
    tb = [
        line
        for line in lines
        if line.startswith("[rank0]:") and ("Traceback" in line or "  " in line or "Error" in line)
    ]
    tb = [line.replace("in train_step", "in <module>") for line in tb]  # one no code caught
    report = read(("job.log", "\n".join([*lines, *tb])))
    assert report.status == "fail" and all(f.id != "job-recovered" for f in report.findings), report.findings


def test_the_store_s_teardown_noise_before_the_group_finished_is_no_failure() -> None:
    text = (FIXTURES / "review_cases" / "restarts" / "18b_healthy_end_should_dump_E_level_torch24.log").read_text()
    report = read(("job.log", text))
    assert report.status == "pass", report.findings
    assert report.findings[0].id == "job-recovered" and "store" in report.findings[0].message


def test_must_not_the_store_s_noise_without_the_finish_passes() -> None:
    """No line of torchrun says the job finished: the store's host went away mid-job, as far as these logs tell."""
    text = (FIXTURES / "review_cases" / "restarts" / "18b_healthy_end_should_dump_E_level_torch24.log").read_text()
    kept = "\n".join(line for line in text.splitlines() if "torch/distributed/elastic" not in line)
    report = read(("job.log", kept))
    assert report.status == "fail" and report.root_cause is not None, report.findings
    assert report.root_cause.id == "store-connection-lost"


UNEXPLAINED = "[rank0]:[E612 10:00:00.000000 something.cpp:12] frobnicator state is inconsistent"


def test_a_line_no_rule_explains_before_the_group_finished_is_information() -> None:
    lines = CASE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "resuming from checkpoint" in line)
    text = [line for line in lines if "[rank1]:" not in line or "loss" in line or "resuming" in line]
    text = [x for x in text if "failed (exitcode" not in x and "attempts left" not in x and "closing signal" not in x]
    at = next(i for i, line in enumerate(text) if "resuming from checkpoint" in line)
    report = read(("job.log", "\n".join([*text[:at], UNEXPLAINED, *text[at:]])))
    assert report.status == "pass", report.findings
    assert [f.severity for f in report.findings if f.id == "unrecognised-error"] == ["info"]


def test_must_not_a_line_no_rule_explains_after_the_group_finished_passes() -> None:
    text = [line for line in CASE.read_text().splitlines() if "[rank1]:" not in line or "loss" in line]
    text = [x for x in text if "failed (exitcode" not in x and "attempts left" not in x and "closing signal" not in x]
    report = read(("job.log", "\n".join([*text, UNEXPLAINED])))
    assert report.status == "unknown", report.findings


RUNS = FIXTURES / "review_cases" / "restarts" / "two_runs"


def test_two_launches_hours_apart_are_said_to_be_two_runs() -> None:
    files = sorted(RUNS.iterdir())
    report = read(*((p.name, p.read_text()) for p in files))
    (runs,) = [f for f in report.findings if f.id == "several-runs"]
    assert runs.severity == "warning" and "2 runs" in runs.message and len(runs.evidence) == 2, runs


def test_must_not_one_job_s_agents_starting_together_are_several_runs() -> None:
    """Two nodes' agents print the banner seconds apart: one run; one launch; a restart prints no second banner."""
    first = sorted(RUNS.iterdir())[0].read_text()
    second_node = first.replace("W0611 22:10:01", "W0611 22:10:04").replace(" 7781 ", " 5120 ")
    for texts in (
        (("node0.log", first), ("node1.log", second_node)),
        (("job.log", first),),
        (("job.log", CASE.read_text()),),
    ):
        report = read(*texts)
        assert all(f.id != "several-runs" for f in report.findings), report.findings
