"""Run a job under the doctor: evidence switched on before it starts, a hang caught live, one verdict at the end.

  ncclcheck run -- torchrun --nproc-per-node 8 train.py --lr 3e-4
  srun ncclcheck run --dir /shared/runs/$SLURM_JOB_ID-$SLURMD_NODENAME -- python train.py

Before the job starts, only what you have not set yourself: Flight Recorder (buffer, dump on timeout, dumps
and dump pipe in the run dir), NCCL_DEBUG=WARN to a file per process (INFO with --deep), PYTHONFAULTHANDLER;
--deep adds TORCH_DISTRIBUTED_DEBUG=DETAIL and desync debug. A sitecustomize hook first on the job's PYTHONPATH
(yours still runs) serves torch's control plane from every rank on a unix socket in DIR/control (--no-control: off). The launcher's output goes to this terminal
unchanged and to DIR/logs/launcher.log. While it runs, the watch sampler looks at this node's ranks: ranks
that stand still longer than --stall give a hang record (DIR/hangs/hang-<time>.json: the findings and every
local rank's stack), one line here, every rank's live Flight Recorder and stacks through the control plane
(DIR/control/hang-*/: the exact culprit when they name one), and a Flight Recorder dump request to NCCL ranks; the job goes on
(--on-hang exit ends it, and says so). The hook also records each rank's point-to-point ops (the peers of a
work.wait() no stack shows) and lets ^C end a rank waiting inside init_process_group. Ranks that hold the others back (the same ones named look after look) give a slow
episode: DIR/slow/slow-<time>.json and one line here. At the end, everything in DIR is diagnosed:
DIR/report.json (ncclcheck.run/1); a job that exited 0 but was slow gets the verdict "slow".
^C and SIGTERM go to the launcher (torchrun ends its workers); nothing is left running.
Exit code: the job's own, a slow job's too (128+N when a signal N ended it, 130 after ^C); 2 bad usage; 127 not found.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ncclcheck import __version__, exits
from ncclcheck.analysis.logs.verdict import with_hangs
from ncclcheck.analysis.run.env import backend_notes, evidence_env, job_env
from ncclcheck.analysis.run.verdict import aborted_at_exit, early_leaver, verdict
from ncclcheck.collectors.logfiles import InputError, sources
from ncclcheck.collectors.rank_ends import RankEnds
from ncclcheck.collectors.run_job import END_GRACE_S, Launched
from ncclcheck.commands.run import control
from ncclcheck.commands.run.live import sample_live
from ncclcheck.commands.run.slow import SlowLog
from ncclcheck.exits import UsageError
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import HangRecord
from ncclcheck.report_files import replace_json
from ncclcheck.signals import handling
from ncclcheck.sources.logs import diagnose  # the same analysis `ncclcheck logs` makes
from ncclcheck.views.console import Lenient, make_console
from ncclcheck.views.run import render, start_lines, to_json

STALL_S = 60.0
ENDING_OURS = "ncclcheck run: --on-hang exit: ending the job (SIGTERM to the launcher, which ends its workers)"
ENDING = (
    "ncclcheck run: asked the launcher to end the job; it may wait for its ranks to exit (torchrun gives them up to "
    "{grace:.0f} s, its grace period, before it kills them) — press ^C again to end them all now"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", metavar="DIR", help="the run dir (default ncclcheck-run-<host>-<time>)")
    parser.add_argument(
        "--stall",
        type=float,
        default=STALL_S,
        metavar="S",
        help=f"seconds ranks stand still before a hang is recorded (default {STALL_S:g}: a rank waits that long "
        "for a peer only when something is wrong; a slow step keeps its ranks moving)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between samples (default 5: a hang is recorded within --stall + 5 s)",
    )
    parser.add_argument("--deep", action="store_true", help="also NCCL_DEBUG=INFO, desync debug, DETAIL checks")
    parser.add_argument(
        "--on-hang",
        choices=("watch", "exit"),
        default="watch",
        help="after a hang is recorded: keep watching (default) or end the job",
    )
    parser.add_argument(
        "--no-control",
        action="store_true",
        help="no control plane hook on the job's PYTHONPATH (a hang's evidence is then the sampled stacks only)",
    )
    parser.add_argument("--json", action="store_true", help="print report.json at the end instead of the verdict")
    parser.add_argument("launcher", nargs=argparse.REMAINDER, help="-- then the launcher command")


def run(args: argparse.Namespace) -> int:
    argv = list(args.launcher)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("ncclcheck run: no command to run: ncclcheck run [options] -- torchrun ... train.py")
    if args.stall < 3 or args.interval <= 0:
        raise UsageError("ncclcheck run: --stall must be at least 3 s and --interval above 0")
    if shutil.which(argv[0]) is None:
        print(f"ncclcheck run: {argv[0]}: command not found (is it installed, or on PATH?)", file=sys.stderr)
        return exits.NOT_FOUND
    host = socket.gethostname()
    run_dir = os.path.abspath(args.dir or f"ncclcheck-run-{host}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        for sub in ("logs", "nccl", "fr", "hangs", "slow"):
            os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    except OSError as exc:
        raise UsageError(f"ncclcheck run: cannot make the run dir {run_dir}: {exc.strerror} (give --dir)") from None
    console = make_console(Lenient(sys.stderr))  # type: ignore[arg-type]
    torch_version = _torch_version()
    settings = evidence_env(os.environ, run_dir, args.deep, torch_version)
    notes = backend_notes(torch_version, os.environ)
    serving, hook_dir, control_notes = control.prepare(run_dir, not args.no_control)
    settings, notes = settings + ((serving,) if serving else ()), notes + control_notes
    start_lines(settings, notes, run_dir, console)
    _write(run_dir, "manifest.json", _manifest(argv, host, settings, notes))
    started = time.time()
    launched = Launched(
        argv, control.with_hook(job_env(os.environ, settings), hook_dir), os.path.join(run_dir, "logs", "launcher.log")
    )
    stop, interrupted, end_now = threading.Event(), threading.Event(), threading.Event()
    hangs: list[HangRecord] = []
    slow = SlowLog(run_dir, console)
    ends = RankEnds()
    received: list[tuple[int, float]] = []  # (signal, when)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            end_now.set()  # a second ^C or SIGTERM: end the tree now
        received.append((signum, time.time()))
        interrupted.set()
        launched.signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)  # torchrun ends its workers

    live = threading.Thread(
        target=sample_live,
        args=(launched, args, run_dir, console, hangs, slow, ends, stop, end_now, interrupted),
        daemon=True,
    )
    with handling((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), on_signal):
        live.start()
        try:
            code, told, ending = None, False, False
            while code is None:
                launched.remember_tree()
                if end_now.is_set():
                    if not received and not ending:
                        console.print(ENDING_OURS, style="yellow")
                    ending = True
                    launched.end()
                if interrupted.is_set() and not told:
                    told = True
                    console.print(ENDING.format(grace=END_GRACE_S), style="yellow")
                code = launched.wait(0.5)
        finally:
            stop.set()
            launched.end()
            launched.close()
            live.join(10.0)
            ends.close()
            control.finish(run_dir)
    ended = time.time()
    if control.no_server(run_dir):
        console.print("ncclcheck run: this torch has no control plane (_WorkerServer): py-spy only", style="yellow")
    # 130 after ^C: the user ended it, whatever the launcher returned
    exit_code = exits.run(code, received[0][0] if received else None)
    report, log_files = _diagnose(run_dir)
    # --on-hang exit: the hang record that ended the job says ncclcheck ended it (unless a signal from outside came)
    report = with_hangs(report, tuple(h if not received else dataclasses.replace(h, ended_job=False) for h in hangs))
    failed = {f.rank for f in report.failures}
    before = [e for e in ends.ends() if not received or e.time < received[0][1]]  # ours to end after a signal
    early = early_leaver(before, failed, report) if exit_code != 0 else None
    episodes, pace = slow.seen.episodes, slow.seen.note
    at_exit = aborted_at_exit(report, control.backends(run_dir)) if exit_code != 0 else None
    result, extra = verdict(exit_code, interrupted.is_set(), tuple(hangs), report, early, episodes, at_exit)
    findings = extra + report.findings
    files = {
        "launcher_log": [os.path.join(run_dir, "logs", "launcher.log")],
        "flight_recorder_dumps": sorted(str(p) for p in Path(run_dir, "fr").glob("rank_*")),
        "nccl_logs": sorted(str(p) for p in Path(run_dir, "nccl").iterdir()),
        "hang_records": [h.path for h in hangs],
        "slow_records": [e.path for e in episodes],
        "control_plane": sorted(str(p) for p in Path(run_dir, "control").glob("hang-*")),
    }
    data = to_json(
        argv,
        run_dir,
        host,
        exit_code,
        ended - started,
        result,
        findings,
        tuple(hangs),
        settings,
        notes,
        files,
        report,
        log_files,
        episodes,
        pace,
    )
    _write(run_dir, "report.json", data)
    if args.json:
        print(json.dumps(data, indent=1), file=Lenient(sys.stdout))
    else:
        render(result, findings, exit_code, run_dir, console, episodes, pace)
    return exit_code


def _diagnose(run_dir: str) -> tuple[LogReport, list[str]]:
    paths = [os.path.join(run_dir, sub) for sub in ("logs", "nccl", "fr")]
    try:
        found = sources([p for p in paths if any(Path(p).iterdir())])
    except InputError:
        found = ()
    return diagnose(found), [s.name for s in found]


def _manifest(argv: list[str], host: str, settings: Any, notes: tuple[str, ...]) -> dict[str, Any]:
    return {
        "schema": "ncclcheck.run-manifest/1",
        "command": argv,
        "host": host,
        "started": time.time(),
        "cwd": os.getcwd(),
        "set": {name: s.value for s in settings if not s.kept for name in s.names},
        "kept": {s.kept_name: s.value for s in settings if s.kept},
        "notes": list(notes),
        "versions": {"ncclcheck": __version__, "python": platform.python_version(), "torch": _torch_version()},
        "slurm": {k: v for k, v in os.environ.items() if k in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_PROCID")},
    }


def _torch_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _write(run_dir: str, name: str, data: dict[str, Any]) -> None:
    replace_json(os.path.join(run_dir, name), data)
