"""A rank that left only NCCL's own lines (an NCCL_DEBUG_FILE: NCCL writes there, torch's watchdog never does) is no
suspect of having stayed silent about a timeout: its torch output is elsewhere. Must-fire: the review's job (all 8
ranks' NCCL files, node 0's console) names no culprit and says why. Must-not: a rank whose NCCL lines share a log with
torch's lines (one console, or a per-rank log that also holds its torch output) is still the suspect."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

from ncclcheck.collectors.logfiles import Reading, sources
from ncclcheck.model.log_report import LogReport
from ncclcheck.sources.logs import diagnose

CASE = FIXTURES / "review_cases" / "nccl_debug_files"


def judge(*paths: Path) -> LogReport:
    reading = Reading()
    return diagnose(sources([str(p) for p in paths], reading), reading, cores=1)


def test_ranks_seen_only_in_nccl_debug_files_are_no_suspects() -> None:
    cause = judge(CASE).root_cause
    assert cause is not None and cause.id == "collective-timeout" and cause.culprits == (), cause
    assert "only NCCL's own lines" in cause.message and "4-7" in cause.message


def test_must_not_a_rank_whose_log_holds_torch_lines_too_escapes_suspicion(tmp_path: Path) -> None:
    """Rank 5's own log holds a torch warning beside its NCCL lines (torchrun --redirects: one file per rank, no
    prefixes): its output is here, and it did not report the timeout."""
    for p in CASE.iterdir():
        (tmp_path / p.name).write_text(p.read_text())
    rank5 = tmp_path / "nccl.gpu-a02.30105.log"
    rank5.write_text(
        rank5.read_text() + "[W612 14:00:00.000000 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 5] using GPU 1"
        " to perform barrier as devices used by this process are currently unknown\n"
    )
    cause = judge(tmp_path).root_cause
    assert cause is not None and cause.culprits == (5,), cause


def test_must_not_nccl_lines_in_the_console_itself_escape_suspicion(tmp_path: Path) -> None:
    """The same NCCL lines, written into node 0's console (NCCL_DEBUG=INFO on stdout): the console holds torch's
    lines, so ranks 4-7's silence there is theirs."""
    console = tmp_path / "console.log"
    console.write_text("".join(p.read_text() for p in sorted(CASE.iterdir())))
    cause = judge(console).root_cause
    assert cause is not None and cause.culprits == (4, 5, 6, 7), cause
