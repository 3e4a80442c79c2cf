"""A timeout whose reporters waited on a suspect (a rank that did not report it), when that suspect's own error is in
the logs, has that error as its cause (analysis/logs/verdict._the_suspects_own), whichever file is read first.
Must-not: an error of a rank that reported the timeout (not a suspect), and a suspect with no error of its own, leave
the timeout the cause."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASE = FIXTURES / "review_cases" / "suspects_own"


def read(*texts: tuple[str, str]) -> LogReport:
    lines = []
    for name, text in texts:
        lines += list(frame_all(text.splitlines(), name))
    return analyse(lines)


def pods() -> tuple[tuple[str, str], tuple[str, str]]:
    return ("master-0.log", (CASE / "master-0.log").read_text()), ("worker-0.log", (CASE / "worker-0.log").read_text())


def test_the_suspect_s_own_error_is_the_cause_whichever_log_comes_first() -> None:
    master, worker = pods()
    for order in ((master, worker), (worker, master)):
        cause = read(*order).root_cause
        assert cause is not None and cause.id == "model-oom" and cause.ranks == (1,), cause


def test_must_not_an_error_of_a_rank_that_reported_the_timeout_is_put_first() -> None:
    master, worker = pods()
    oom = "\n".join(line.replace("[rank1]:", "[rank0]:") for line in worker[1].splitlines() if "OutOfMemory" in line)
    worker_silent = "[rank1]:step 4011 loss 1.1020"
    cause = read(master, ("worker-0.log", worker_silent), ("extra.log", oom)).root_cause
    assert cause is not None and cause.id == "collective-timeout" and cause.culprits == (1,), cause


def test_must_not_a_suspect_with_no_error_of_its_own_clears_the_timeout() -> None:
    master, _ = pods()
    cause = read(master, ("worker-0.log", "[rank1]:step 4011 loss 1.1020")).root_cause
    assert cause is not None and cause.id == "collective-timeout" and cause.culprits == (1,), cause
