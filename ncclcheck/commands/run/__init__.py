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
import json
import shutil
import sys

from ncclcheck import exits
from ncclcheck.commands.run.conclude import conclude
from ncclcheck.commands.run.settings import settings, switch_on
from ncclcheck.commands.run.supervise import supervise
from ncclcheck.report_files import replace_json
from ncclcheck.views.console import Lenient, make_console
from ncclcheck.views.run import render, to_json

STALL_S = 60.0


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
    wanted = settings(args)
    if shutil.which(wanted.argv[0]) is None:
        print(f"ncclcheck run: {wanted.argv[0]}: command not found (is it installed, or on PATH?)", file=sys.stderr)
        return exits.NOT_FOUND
    console = make_console(Lenient(sys.stderr))  # type: ignore[arg-type]
    evidence = switch_on(wanted, console)
    outcome = conclude(wanted, evidence, supervise(wanted, evidence, console), console)
    data = to_json(outcome)
    replace_json(wanted.run_dir.report, data)
    if wanted.json:
        print(json.dumps(data, indent=1), file=Lenient(sys.stdout))
    else:
        render(outcome, console)
    return outcome.exit_code
