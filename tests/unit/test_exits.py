"""Every verdict of every command walked to its exit code, through the one home that maps them (``ncclcheck.exits``).

The expected codes are the README's exit-code table, written out here on their own: a change to a mapping fails
here. The vocabularies come from the code that gives them (the statuses of env's checks, the reports' own
``verdict``/``status`` properties, every ``Verdict("...")`` the package builds for watch), so a verdict added there
without a code fails here too, never a quiet 0."""

from __future__ import annotations

import ast
import signal
from pathlib import Path

import pytest
from conftest import REPO
from watch_states import job

from ncclcheck import exits
from ncclcheck.commands.smoke.rank_report import rank_report
from ncclcheck.commands.watch import once_exit
from ncclcheck.model.checks import Check, EnvReport, Status
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.smoke import CONCLUDED, INTERRUPTED, RUNNING, SmokeSummary
from ncclcheck.model.watch import Verdict, WatchState

PACKAGE = REPO / "ncclcheck"

ERROR = Finding("collective-timeout", "error", "rank 1 timed out")
WARNING = Finding("slow-rank", "warning", "rank 3 is slow")
INFO = Finding("finished", "info", "every rank exited")


# --- env: a node fails when one of its checks fails; a warning or a skipped check fails none ----------------------


@pytest.mark.parametrize("status", list(Status))
def test_env_exits_1_only_when_a_check_fails(status: Status) -> None:
    report = EnvReport("node0", "/", "2.21", (Check("gpu.count", Status.OK, "8 GPUs"), Check("x.y", status, "s")))
    expected = {"fail": 1, "pass": 0}[report.verdict]
    assert report.verdict == ("fail" if status is Status.FAIL else "pass")
    assert exits.env(report.verdict) == expected


def test_env_table_holds_exactly_the_verdicts_env_gives() -> None:
    given = {EnvReport("n", "/", "", (Check("a.b", s, ""),)).verdict for s in Status}
    assert given == set(exits.ENV) == {"pass", "fail"}


# --- logs: an error is 1; unknown (nothing explains an error line, a cut log, nothing read) is 4, never 0 ----------


def _logs(*findings: Finding, incomplete: bool = False, nothing_read: bool = False) -> LogReport:
    return LogReport(findings, (), (), (), None, 10, incomplete=incomplete, nothing_read=nothing_read)


LOG_CASES = {
    "an error": (_logs(ERROR, WARNING), "fail", 1),
    "an error line no rule explains": (_logs(Finding("unrecognised-error", "warning", "?")), "unknown", 4),
    "a log cut short": (_logs(incomplete=True), "unknown", 4),
    "every input empty": (_logs(nothing_read=True), "unknown", 4),
    "an error beside a cut log": (_logs(ERROR, incomplete=True), "fail", 1),
    "a healthy job with chatty warnings": (_logs(WARNING, INFO), "pass", 0),
    "nothing wrong": (_logs(), "pass", 0),
}


@pytest.mark.parametrize("case", list(LOG_CASES))
def test_logs_status_maps_to_its_code(case: str) -> None:
    report, status, code = LOG_CASES[case]
    assert report.status == status
    assert exits.logs(report.status) == code


def test_logs_table_holds_exactly_the_statuses_logs_gives() -> None:
    assert {status for _, status, _ in LOG_CASES.values()} == set(exits.LOGS)


# --- smoke: pass 0, anything else 1, 3 when torchrun could not start ---------------------------------------------


def _smoke(*findings: Finding, state: str = CONCLUDED, finished: bool = True) -> SmokeSummary:
    return SmokeSummary(4, 1, 0, "gloo", (), None, findings, (), (), "/tmp/x", finished, state)


SMOKE_CASES = {
    "every op passed": (_smoke(), False, "pass", 0),
    "a rank failed": (_smoke(ERROR), False, "fail", 1),
    "ranks never finished": (_smoke(finished=False), False, "fail", 1),
    "torchrun could not start": (_smoke(Finding("launch-failed", "error", "no torchrun")), True, "fail", 3),
    "still running": (_smoke(state=RUNNING), False, "running", 1),
    "interrupted": (_smoke(state=INTERRUPTED), False, "interrupted", 1),
}


@pytest.mark.parametrize("case", list(SMOKE_CASES))
def test_smoke_verdict_maps_to_its_code(case: str) -> None:
    summary, launch_failed, verdict, code = SMOKE_CASES[case]
    assert summary.verdict == verdict
    assert exits.smoke(summary.verdict, launch_failed) == code


def test_smoke_table_holds_exactly_the_verdicts_smoke_gives() -> None:
    assert {verdict for _, _, verdict, _ in SMOKE_CASES.values()} == set(exits.SMOKE)


@pytest.mark.parametrize("case", ["every op passed", "a rank failed", "ranks never finished"])
def test_smoke_under_the_users_torchrun_exits_as_the_launcher_does(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's own report (no ncclcheck launcher: the user's torchrun) maps its verdict through the same table."""
    summary, _, _, code = SMOKE_CASES[case]
    monkeypatch.setattr("ncclcheck.commands.smoke.rank_report.summarise", lambda *args: summary)
    assert rank_report(str(tmp_path), "gloo") == code


# --- watch --once (one node or every node): a warning or error finding is 1, pending or undecided 4 ---------------


def _watch_statuses() -> set[str]:
    """Every status the package builds a watch ``Verdict`` with, read from the code."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Verdict":
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), f"{path}: {ast.dump(node)}"
                found.add(first.value)
    return found


WATCH_CODES = {"ok": 0, "finished": 0, "warning": 1, "problem": 1, "pending": 4, "undecided": 4}


def test_watch_table_holds_exactly_the_statuses_watch_gives() -> None:
    assert _watch_statuses() == set(WATCH_CODES) == set(exits.WATCH)


def _state(status: str, *findings: Finding) -> WatchState:
    return WatchState(100.0, job(4), (), findings, Verdict(status, "…"))


@pytest.mark.parametrize("status", list(WATCH_CODES))
def test_watch_once_maps_each_status_when_no_finding_flags_a_problem(status: str) -> None:
    assert once_exit(_state(status)) == WATCH_CODES[status]
    assert once_exit(_state(status, INFO)) == WATCH_CODES[status]  # an info finding decides nothing


@pytest.mark.parametrize("status", list(WATCH_CODES))
@pytest.mark.parametrize("finding", [ERROR, WARNING], ids=["error", "warning"])
def test_watch_once_exits_1_on_an_error_or_warning_finding_whatever_the_status(status: str, finding: Finding) -> None:
    """``finished`` with a warning (some ranks failed), ``pending`` beside a warning: never 0 over a finding."""
    assert once_exit(_state(status, INFO, finding)) == 1


# --- run: the job's own code, whatever its verdict; 128 + N after a signal ended it --------------------------------


@pytest.mark.parametrize(
    ("returncode", "signalled", "code"),
    [
        (0, None, 0),
        (1, None, 1),
        (3, None, 3),
        (-signal.SIGKILL, None, 137),  # the launcher killed by SIGKILL, as a shell says
        (-signal.SIGTERM, None, 143),
        (1, signal.SIGINT, 130),  # ^C: the user ended it, whatever the launcher returned
        (-signal.SIGINT, signal.SIGINT, 130),
        (1, signal.SIGTERM, 143),
        (0, signal.SIGTERM, 0),  # the job finished cleanly despite the signal: its own 0 stands
    ],
)
def test_run_exits_with_the_jobs_own_code(returncode: int, signalled: int | None, code: int) -> None:
    assert exits.run(returncode, signalled) == code


# --- a verdict without a code is an error, never a quiet 0 --------------------------------------------------------


@pytest.mark.parametrize(
    "mapping",
    [
        lambda: exits.env("healthy"),
        lambda: exits.logs("ok"),
        lambda: exits.smoke("concluded", False),
        lambda: exits.watch("fine", ()),
    ],
    ids=["env", "logs", "smoke", "watch"],
)
def test_a_verdict_no_table_names_is_no_pass(mapping: object) -> None:
    with pytest.raises(KeyError):
        mapping()  # type: ignore[operator]


def test_smoke_that_verified_nothing_is_no_pass(tmp_path: Path) -> None:
    """Rank 0's report over a log dir where no rank wrote a result (every op of zero ranks "passed") fails with a
    finding that says nothing was verified; a run with results and no error still passes (must-not)."""
    from ncclcheck.analysis.smoke.summary import summarise
    from ncclcheck.model.smoke import Launch, OpResult

    assert rank_report(str(tmp_path), "gloo") == exits.PROBLEM
    launch = Launch(2, 1, 0, None, None, "gloo", str(tmp_path), ())
    empty = summarise(launch, (), (), None, (), True)
    assert empty.verdict == "fail" and [f.id for f in empty.findings] == ["smoke-nothing-verified"]
    one = OpResult("all_reduce", 1024, 256, "ok", 10.0, 12.0, 0.1, 0.1, 0)
    assert summarise(launch, (), (one,), None, (), True).verdict == "pass"
