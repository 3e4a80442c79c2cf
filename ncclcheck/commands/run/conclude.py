"""``ncclcheck run`` once the job is over: everything in the run dir diagnosed (as ``ncclcheck logs`` does), the
hangs and slow episodes seen live joined to it, and one verdict with the job's own exit code."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ncclcheck import exits
from ncclcheck.analysis.logs.verdict import with_hangs
from ncclcheck.analysis.run.verdict import aborted_at_exit, early_leaver, verdict
from ncclcheck.collectors.logfiles import InputError, sources
from ncclcheck.commands.run.control import backends, no_server
from ncclcheck.commands.run.settings import Evidence, RunSettings
from ncclcheck.commands.run.supervise import Supervised
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import RunDir, RunOutcome
from ncclcheck.sources.logs import diagnose  # the same analysis `ncclcheck logs` makes


def conclude(wanted: RunSettings, evidence: Evidence, job: Supervised, console: Any) -> RunOutcome:
    run_dir = wanted.run_dir
    if no_server(run_dir):
        console.print("ncclcheck run: this torch has no control plane (_WorkerServer): py-spy only", style="yellow")
    exit_code = exit_code_of(job)
    report, log_files = _diagnose(run_dir)
    # --on-hang exit: the hang record that ended the job says ncclcheck ended it (unless a signal from outside came)
    hangs = tuple(h if not job.received else dataclasses.replace(h, ended_job=False) for h in job.hangs)
    report = with_hangs(report, hangs)
    failed = {f.rank for f in report.failures}
    before = [e for e in job.rank_ends if not job.received or e.time < job.received[0][1]]  # ours after a signal
    early = early_leaver(before, failed, report) if exit_code != 0 else None
    episodes = job.slow.episodes
    at_exit = aborted_at_exit(report, backends(run_dir)) if exit_code != 0 else None
    result, extra = verdict(exit_code, job.interrupted, job.hangs, report, early, episodes, at_exit)
    return RunOutcome(
        wanted.argv,
        run_dir,
        wanted.host,
        exit_code,
        job.ended - job.started,
        result,
        report,
        findings=extra + report.findings,
        hangs=job.hangs,
        settings=evidence.settings,
        notes=evidence.notes,
        files=_files(run_dir, job),
        log_files=tuple(log_files),
        slow=episodes,
        pace=job.slow.note,
    )


def exit_code_of(job: Supervised) -> int:
    """The job's own exit code (128+N when a signal N ended it); 130 after ^C: the user ended it, whatever the
    launcher returned."""
    return exits.run(job.code, job.received[0][0] if job.received else None)


def _files(run_dir: RunDir, job: Supervised) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return (
        ("launcher_log", (run_dir.launcher_log,)),
        ("flight_recorder_dumps", tuple(sorted(str(p) for p in Path(run_dir.fr).glob("rank_*")))),
        ("nccl_logs", tuple(sorted(str(p) for p in Path(run_dir.nccl).iterdir()))),
        ("hang_records", tuple(h.path for h in job.hangs)),
        ("slow_records", tuple(e.path for e in job.slow.episodes)),
        ("control_plane", tuple(sorted(str(p) for p in Path(run_dir.control).glob("hang-*")))),
    )


def _diagnose(run_dir: RunDir) -> tuple[LogReport, list[str]]:
    paths = [run_dir.logs, run_dir.nccl, run_dir.fr]
    try:
        found = sources([p for p in paths if any(Path(p).iterdir())])
    except InputError:
        found = ()
    return diagnose(found), [s.name for s in found]
