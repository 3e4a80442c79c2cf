"""Run every collective across ranks and nodes, verified and timed, with a watchdog that names the stuck rank.

Launches the ranks through torch's elastic launcher (torch.distributed.run). A rank that makes no
progress for --timeout seconds is dumped with py-spy and the job is ended: the report names the op,
the culprit rank(s) and what every rank was doing. ^C, SIGTERM and SIGHUP end every rank and print
what was seen so far. Exit code: 0 pass, 1 fail or hang, 2 usage error, 3 could not launch,
130 ^C, 128+N another signal N.

examples:
  ncclcheck smoke --nproc 2 --backend gloo
  ncclcheck smoke --nodes 2 --node-rank 0 --master-addr 10.0.0.1 --drill hang@1:all_reduce
"""

from __future__ import annotations

import argparse
import math
import signal
import socket
import subprocess
import sys

from rich.console import Console

from ncclcheck import exits
from ncclcheck.analysis.smoke.plan import DEFAULT_ITERS, DEFAULT_SIZES, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP, OPS
from ncclcheck.analysis.smoke.summary import summarise
from ncclcheck.collectors import launch as launcher
from ncclcheck.commands.smoke.settings import DEFAULT_MULTINODE_PORT, Usage, settings
from ncclcheck.commands.smoke.supervise import interrupted, supervise, with_tui
from ncclcheck.exits import UsageError
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.smoke import Launch, SmokeSummary
from ncclcheck.report_files import replace_json, unwritable
from ncclcheck.signals import Ended, handling
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke import render, to_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, help="ranks on this node (default: one per GPU with nccl, 2 with gloo)")
    parser.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="default: auto (nccl if there are GPUs, else gloo)",
    )
    parser.add_argument("--nodes", type=int, help="nodes in the job (default: $SLURM_NNODES or 1)")
    parser.add_argument("--node-rank", type=int, help="this node's rank (default: $SLURM_NODEID or 0)")
    parser.add_argument("--master-addr", help="node 0's address (default: first host of $SLURM_JOB_NODELIST)")
    parser.add_argument(
        "--master-port",
        type=int,
        help=f"rendezvous port (default: {DEFAULT_MULTINODE_PORT} on"
        " several nodes; on one node a free port torchrun picks)",
    )
    parser.add_argument("--ops", default=",".join(OPS), help="comma list of ops (default: all)")
    parser.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help="MIN:MAX (x4 steps, MAX included) or a list, e.g. 8:64M (default: %(default)s)",
    )
    parser.add_argument(
        "--iters", type=int, default=DEFAULT_ITERS, help="timed iterations per op and size (default: %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=int, default=DEFAULT_WARMUP, help="untimed iterations first, 0 for none (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds without progress before a rank is stuck (default: %(default)s)",
    )
    parser.add_argument(
        "--drill",
        action="append",
        default=[],
        metavar="KIND@RANK:OP",
        help="make a rank misbehave: hang@1:all_reduce, crash@0:broadcast, kill@1:all_reduce (SIGKILL),"
        " mismatch@1:all_gather (default: none)",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="find the bad node or link: each node alone, then pairs, halves and across their boundary",
    )
    parser.add_argument(
        "--busbw-floor",
        type=float,
        metavar="GBPS",
        help="with --isolate: a group below this busbw fails (default: a quarter of the nodes' median)",
    )
    parser.add_argument("--tui", action="store_true", help="show the ranks live in the watch app while it runs")
    parser.add_argument("--json", metavar="FILE", help="write the ncclcheck.smoke/1 report to FILE as it runs")
    parser.add_argument(
        "--log-dir",
        metavar="DIR",
        help="keep rank logs, NCCL logs and dumps here; a DIR that is not"
        " empty gets a new sub-directory per run (default: ./ncclcheck-logs/smoke-TIME-nodeN)",
    )


def run(args: argparse.Namespace) -> int:
    console = make_console()
    bad_output = unwritable(args.json)
    if bad_output:
        raise _usage(f"--json {args.json}: {bad_output} (give a file in a directory that exists)")
    try:
        launch = settings(args)
    except Usage as exc:
        raise _usage(str(exc)) from None
    if args.isolate:
        return _isolate(args, launch, console)
    where = f"{launch.nproc * launch.nodes} rank(s) on {launch.nodes} node(s), {launch.backend}"
    console.print(f"ncclcheck smoke: {where}, logs in {launch.log_dir}", highlight=False)
    unresolved = _unresolvable(launch)
    if unresolved:
        return _report(_launch_failed(launch, unresolved), args.json, exits.LAUNCH_FAILED)
    with handling():
        try:
            proc = launcher.start(launch)
        except OSError as exc:
            failed = Finding(
                smoke_ids.LAUNCH_FAILED,
                "error",
                f"could not start torchrun: {exc}",
                "check the log directory and this Python",
            )
        else:
            return _supervised(proc, launch, args, console)
    return _report(_launch_failed(launch, failed), args.json, exits.LAUNCH_FAILED)


def _supervised(proc: subprocess.Popen[bytes], launch: Launch, args: argparse.Namespace, console: Console) -> int:
    """Supervise the launched job to its verdict; whatever ends this (a signal, an error), the job ends too."""
    try:
        if args.tui and sys.stdout.isatty():
            summary = with_tui(proc, launch, args.timeout, args.json)
        else:
            if args.tui:
                console.print("ncclcheck smoke: --tui needs a terminal; printing progress instead", highlight=False)
            summary = supervise(proc, launch, args.timeout, args.json, console)
    except (Ended, KeyboardInterrupt) as stop:
        launcher.end_tree(proc, [])  # ^C, SIGTERM or SIGHUP (timeout, kill, a CI cancel): the job ends with us
        signum = stop.signum if isinstance(stop, Ended) else signal.SIGINT
        print(
            f"ncclcheck smoke: ended by {signal.Signals(signum).name}; torchrun and every rank ended", file=sys.stderr
        )
        return _report(interrupted(launch), args.json, exits.by_signal(signum))
    except BaseException:
        launcher.end_tree(proc, [])  # any error after launch: never leave a job running
        raise
    failed_launch = any(f.id == smoke_ids.LAUNCH_FAILED for f in summary.findings)
    return _report(summary, None, exits.smoke(summary.verdict, failed_launch))


def _isolate(args: argparse.Namespace, launch: Launch, console: Console) -> int:
    from ncclcheck.commands.smoke import isolate

    if args.drill or args.tui:
        raise _usage("--isolate runs its own stages: without --drill or --tui")
    if args.busbw_floor is not None and not (math.isfinite(args.busbw_floor) and args.busbw_floor > 0):
        raise _usage(f"--busbw-floor {args.busbw_floor}: give GB/s > 0")
    args.isolate_ops = isolate.OPS if args.ops == ",".join(OPS) else args.ops
    console.print(f"ncclcheck smoke --isolate: {launch.nodes} node(s), {launch.backend}, logs in {launch.log_dir}")
    return isolate.run(args, launch, console)


def _usage(message: str) -> UsageError:
    return UsageError(f"ncclcheck smoke: {message} (see ncclcheck smoke --help)")


def _report(summary: SmokeSummary, json_path: str | None, code: int) -> int:
    render(summary, make_console())
    if json_path:
        replace_json(json_path, to_json(summary))
    return code


def _launch_failed(launch: Launch, finding: Finding) -> SmokeSummary:
    return summarise(launch, (), (), None, (finding,), False)


def _unresolvable(launch: Launch) -> Finding | None:
    """A --master-addr that does not resolve fails at once, instead of after torchrun's rendezvous timeout."""
    if launch.nodes == 1 or not launch.master_addr:
        return None
    try:
        socket.getaddrinfo(launch.master_addr, launch.master_port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return Finding(
            smoke_ids.LAUNCH_FAILED,
            "error",
            f"the rendezvous address {launch.master_addr}:{launch.master_port} does not resolve ({exc})",
            "give node 0's IP or a name every node resolves (/etc/hosts or DNS); check it with"
            f" `ncclcheck env --master-addr {launch.master_addr} --master-port {launch.master_port}`",
        )
    return None
