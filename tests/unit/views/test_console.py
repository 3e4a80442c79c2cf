"""Reports written without a terminal (a CI log, a file) keep a path, a command or a URL whole on one line, so it
can be pasted; on a terminal rich wraps at the terminal's width (the newcomer's issue 24, point 6)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.smoke.progress import rank_died
from ncclcheck.cli import main
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import RunDir, RunOutcome, RunVerdict
from ncclcheck.model.smoke import OpResult, SmokeSummary
from ncclcheck.views import run as run_view
from ncclcheck.views import smoke as smoke_view
from ncclcheck.views import watch as watch_view
from ncclcheck.views.console import make_console

# a path as long as torchrun's under a CI runner's work dir: far past the 130 columns reports were wrapped at
DEEP = "/".join(f"ci_runner_work_directory_level_{n:02d}" for n in range(6))


def deep(tmp_path: Path) -> Path:
    where = tmp_path / DEEP
    where.mkdir(parents=True)
    return where


def whole(path: str, text: str) -> bool:
    """``path`` is on one line of ``text``, unbroken."""
    return any(path in line for line in text.splitlines())


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_console_without_a_terminal_never_wraps_and_one_with_a_terminal_does(tmp_path: Path) -> None:
    path = str(deep(tmp_path) / "attempt_0" / "0" / "stderr.log")
    piped, tty = io.StringIO(), Tty()
    for out in (piped, tty):
        make_console(out).print(f"   fix: read that rank's stderr ({path}); the other ranks' errors are echoes")
    assert len(path) > 200 and whole(path, piped.getvalue())
    assert not whole(path, tty.getvalue())  # a terminal keeps rich's wrapping at its width


def test_logs_keeps_a_long_evidence_path_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = deep(tmp_path) / "rank9.log"
    shutil.copy(FIXTURES / "nccl_logs" / "32_socket-transport-recv-broken-pipe_remote-crash.log", log)
    assert main(["logs", str(log)]) == 1
    out = capsys.readouterr().out
    assert whole(f"{log}:1:", out), out


def test_env_keeps_a_long_root_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = deep(tmp_path) / "node7"
    shutil.copytree(FIXTURES / "sysfs" / "scenario1_ib_roce_down", tree)
    main(["env", "--root", str(tree)])
    out = capsys.readouterr().out
    assert whole(f"files read under {tree}", out), out
    assert whole(f"{tree}/dev/shm is not in the copied tree", out), out  # inside the table too


def test_smoke_keeps_the_crashed_rank_stderr_path_whole(tmp_path: Path) -> None:
    stderr = str(deep(tmp_path) / "ranks" / "697717a5_gw55ru57" / "attempt_0" / "2" / "stderr.log")
    died = rank_died(2, None, None, "", stderr)
    row = OpResult("broadcast", 8, 2, "ok", 415.8, 719.4, 0.0, 0.0, 0)
    summary = SmokeSummary(3, 1, 0, "gloo", (row,), None, (died,), (), (), str(tmp_path), False)
    out = io.StringIO()
    smoke_view.render(summary, make_console(out))
    assert whole(f"({stderr})", out.getvalue()), out.getvalue()


def test_run_keeps_its_report_path_and_a_fix_whole(tmp_path: Path) -> None:
    run_dir = str(deep(tmp_path) / "runs" / "exp7")
    finding = Finding("rank-died", "error", "rank 2 died", f"read {run_dir}/ranks/2/stderr.log", (2,), culprits=(2,))
    out = io.StringIO()
    verdict = RunVerdict("fail", "rank-died", (2,), "rank 2 died")
    outcome = RunOutcome(
        (), RunDir(run_dir), "", 1, 0.0, verdict, LogReport((), (), (), (), None, 0), findings=(finding,)
    )
    run_view.render(outcome, make_console(out))
    assert whole(f"read {run_dir}/ranks/2/stderr.log", out.getvalue()), out.getvalue()
    assert whole(f"report: {run_dir}/report.json", out.getvalue()), out.getvalue()


def test_watch_once_keeps_a_long_fix_whole() -> None:
    """``watch --once`` into a file: each finding's fix (a command to run, names to set) on one line."""
    state = states(job(3), *[all_in(3, "all_reduce", r1=sample(1, stack("broadcast", 57)))] * 4)
    out = io.StringIO()
    watch_view.render(state, make_console(out))
    fixes = [f"fix: {f.fix}" for f in state.findings if f.fix]
    assert fixes and max(map(len, fixes)) > 130
    assert all(whole(fix, out.getvalue()) for fix in fixes), out.getvalue()


def test_every_command_prints_through_make_console() -> None:
    """One place decides how reports are wrapped: no command makes its own rich Console."""
    makers = [p for p in (REPO / "ncclcheck").rglob("*.py") if "Console(" in p.read_text()]
    assert makers == [REPO / "ncclcheck" / "views" / "console.py"], makers
