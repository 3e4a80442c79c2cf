"""Watch a running or stuck distributed job on this node: every rank's collective, call site and state.

Attaches with no code change: ranks are found by their environment (RANK, WORLD_SIZE, ...) or as
torch.multiprocessing.spawn children; stacks are read with py-spy --nonblocking (the job is never
paused, slowed or signalled; --native, which adds C/C++ frames, is the exception: py-spy pauses each
rank briefly to unwind them). Without a terminal, or with --once, watches until the answer is clear
(ranks blocked in different collectives: about 2 s; a rank outside any collective while the others
wait: --stall; a job that runs but is held back by a rank or node the others wait for in every step,
from each rank's stacks sampled 10 times a second: about 10 s) or --settle ends, and prints once.
Without --settle, a verdict still pending at the window's end (a rank that may hold the others back, not
proven yet) is watched on, up to 2 minutes.
Exit code (--once): 0 no problem found, 1 a problem or warning (a slow rank is a warning), 2 usage error
(also: several jobs and no --job), 3 no job found, 4 the evidence cannot decide (ranks stood still with busy
main threads: a long computation and a hang at a CUDA sync look alike; or nothing proven by the end: still
pending); the live view exits 0 on q, 130 on ^C.

Every node of a job: one agent per node (`watch --agent`, one JSON line per sample on stdout, no socket)
started through SLURM (--slurm) or any command that runs it on every node and forwards its output
(--fanout), or lines recorded before (--agents); the ranks of all nodes are judged together, and a node
that sends nothing is named.

examples:
  ncclcheck watch                       # the live view (Enter stack, q quit, p pause, s sort, f flagged, d save,
                                        # c compare a slow rank's call sites with a typical one's)
  ncclcheck watch --once --json
  ncclcheck watch --pid 4242            # a rank or the launcher of the job to watch
  ncclcheck watch --slurm 81234         # every node of SLURM job 81234 (srun --overlap, one agent per node)
  ncclcheck watch --fanout 'pdsh -w node[1-16] {}'
  ncclcheck watch --fanout 'for h in a b; do ssh $h {} & done; wait'
  ncclcheck watch --agents lines.jsonl  # agent lines collected before (replay)
  ncclcheck watch --agents '/shared/runs/J/*/watch-agent.jsonl' --follow  # every node's `ncclcheck run`, live
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time

from ncclcheck import exits
from ncclcheck.analysis.watch.judge import QUICK_S, decided, next_delay, rejudge, stands
from ncclcheck.collectors.jobs import discover, launcher_waiting, pick, wait_for_ranks
from ncclcheck.exits import UsageError
from ncclcheck.model.watch import Job, WatchState
from ncclcheck.sources.live import samples
from ncclcheck.sources.watch import LiveSource
from ncclcheck.views.console import make_console
from ncclcheck.views.watch import jobs_json, jobs_lines, render, to_json

LAUNCH_WAIT_S = 60.0  # how long watch --pid LAUNCHER waits for the launcher's ranks to start (torchrun's rendezvous)
ONCE_LIMIT_S = 120.0  # how long --once without --settle watches on while the verdict is still pending


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job", metavar="ID", help="the job to watch when several run on this node (a unique id prefix)"
    )
    parser.add_argument("--pid", type=int, help="a rank, the launcher, or a process above them (srun, a wrapper)")
    parser.add_argument(
        "--interval", type=float, default=1.5, metavar="S", help="seconds between samples (default 1.5)"
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=10.0,
        metavar="S",
        help=f"standing still this long counts where a quick answer is not possible (default 10, at least {QUICK_S:g})",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        metavar="S",
        help="--once: watch this long, then judge what stood still through the whole window"
        " (default: until the answer is clear, at most --stall + 2 intervals)",
    )
    parser.add_argument("--once", action="store_true", help="watch, print once and exit (also without a terminal)")
    parser.add_argument("--json", action="store_true", help="print the ncclcheck.watch/2 JSON (implies --once)")
    parser.add_argument("--no-stacks", action="store_true", help="process state, CPU and sockets only, no py-spy")
    nodes = parser.add_argument_group("every node of the job")
    nodes.add_argument(
        "--slurm",
        nargs="?",
        const="",
        metavar="JOBID",
        help="watch every node of this SLURM job (default $SLURM_JOB_ID) through srun --overlap",
    )
    nodes.add_argument(
        "--fanout",
        metavar="CMD",
        help="a shell command that runs {} (the agent command) on every node and forwards its output",
    )
    nodes.add_argument("--agents", metavar="FILE", help="agent lines collected before (- for stdin)")
    nodes.add_argument(
        "--follow",
        action="store_true",
        help="with --agents: files still being written (a glob, e.g. every node's ncclcheck run dir: "
        "runs/*/watch-agent.jsonl), followed live",
    )
    nodes.add_argument(
        "--agent-cmd", metavar="CMD", help="how to run ncclcheck on the nodes (default: this python -m ncclcheck)"
    )
    nodes.add_argument("--slurm-job", metavar="JOBID", help=argparse.SUPPRESS)  # the agent: only this SLURM job's ranks
    nodes.add_argument(
        "--agent",
        action="store_true",
        help="be the agent: one ncclcheck.watch-agent/3 JSON line per sample of this node, on stdout",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="C/C++ frames too (where NCCL or gloo waits); py-spy must pause each rank briefly to unwind"
        " them, so this is the one mode that stops the job for a moment at every sample",
    )


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem:
        raise UsageError(f"ncclcheck watch: {problem}")
    if args.agent:
        from ncclcheck.commands.watch import agent as watch_agent

        return watch_agent.run(args)
    live = not (args.once or args.json or not sys.stdout.isatty())
    if args.fanout or args.agents or args.slurm is not None:
        from ncclcheck.commands.watch import nodes as watch_nodes

        return watch_nodes.run(args, live)
    jobs = discover(args.pid)
    if not jobs and args.pid is not None and launcher_waiting(args.pid):
        wait = args.settle if args.settle is not None else max(args.stall, LAUNCH_WAIT_S)
        print(
            f"ncclcheck watch: pid {args.pid} is a launcher whose ranks have not started yet: waiting for them "
            f"(up to {wait:.0f} s)",
            file=sys.stderr,
        )
        jobs = wait_for_ranks(args.pid, wait)
    if args.job:
        jobs = pick(jobs, args.job)
        if len(jobs) > 1:
            print(f"ncclcheck watch: --job {args.job} matches {len(jobs)} jobs; give more of the id:", file=sys.stderr)
            print("\n".join(jobs_lines(jobs)), file=sys.stderr)
            return exits.USAGE
    if not jobs:
        what = f"job {args.job}" if args.job else f"pid {args.pid}" if args.pid else "torch distributed job"
        if args.pid is not None and launcher_waiting(args.pid):
            what = f"rank of launcher pid {args.pid} (it started none while watched)"
        print(
            f"ncclcheck watch: no {what} found on this node (ranks carry RANK and WORLD_SIZE, or are "
            "torch.multiprocessing.spawn children; run as the job's user or root)",
            file=sys.stderr,
        )
        return exits.NO_JOB
    if len(jobs) > 1 and not live:
        if args.json:
            print(json.dumps(jobs_json(jobs), indent=1))
        print(
            "ncclcheck watch: several jobs on this node; pick one with --job ID (a unique prefix will do):",
            file=sys.stderr,
        )
        print("\n".join(jobs_lines(jobs)), file=sys.stderr)
        return exits.USAGE
    if not live:
        source = _source(jobs[0], args)
        try:
            state = _once(source, args)
        finally:
            source.close()
        if args.json:
            print(json.dumps(to_json(state, args.interval), indent=1))
        else:
            render(state, make_console())
        return once_exit(state)
    from ncclcheck.tui.app import WatchApp  # textual only when there is a terminal

    made: list[LiveSource] = []

    def make(job: Job) -> LiveSource:
        made.append(_source(job, args))
        return made[-1]

    try:
        if len(jobs) > 1:
            app = WatchApp(None, args.interval, jobs=jobs, make_source=make, samples=samples)
        else:
            app = WatchApp(make(jobs[0]), args.interval, samples=samples)
        app.run()
    finally:
        for source in made:
            source.close()
    # Quitting the live view is not a verdict (scripts use --once): q exits 0, ^C 130 as the exit table says.
    return exits.INTERRUPTED if app.return_code == exits.INTERRUPTED else exits.OK


def once_exit(state: WatchState) -> int:
    """--once's exit code: a finding is a problem; pending at the end (nothing judged yet, a slow rank not proven)
    is no pass any more than undecided is: the evidence did not decide."""
    return exits.watch(state.verdict.status, (f.severity for f in state.findings))


def _usage_problem(args: argparse.Namespace) -> str | None:
    numbers = {"--interval": args.interval, "--stall": args.stall, "--settle": args.settle}
    for flag, value in numbers.items():
        if value is not None and not math.isfinite(value):
            return f"{flag} must be a number of seconds, not {value}"
    if args.interval <= 0:
        return "--interval must be > 0"
    if args.stall < QUICK_S or (args.settle is not None and args.settle < QUICK_S):
        return (
            f"--stall and --settle must be at least {QUICK_S:g} s: standing still cannot be told from a pause in less"
        )
    if args.native and args.no_stacks:
        return "--native needs stacks; drop --no-stacks"
    ways = [
        flag
        for flag, given in (
            ("--slurm", args.slurm is not None),
            ("--fanout", args.fanout),
            ("--agents", args.agents),
            ("--agent", args.agent),
        )
        if given
    ]
    if len(ways) > 1:
        return f"{' and '.join(ways)} are different ways to watch: give one"
    if ways and args.pid is not None and not args.agent:
        return "--pid names a process on this node; with agents on every node, use --job ID to pick the job"
    if args.agent_cmd is not None and not (args.slurm is not None or args.fanout):
        return "--agent-cmd is for --slurm or --fanout"
    if args.follow and (not args.agents or args.agents == "-"):
        return "--follow is for --agents FILE (files that ncclcheck run or an agent are still writing)"
    return None


def _source(job: Job, args: argparse.Namespace) -> LiveSource:
    return LiveSource(job, args.stall, stacks=not args.no_stacks, native=args.native)


def _once(source: LiveSource, args: argparse.Namespace) -> WatchState:
    """Sample until the answer is clear (without --settle), the job has finished, or the window ends; then
    judge the window. Without --settle, a verdict still pending at the window's end (a rank that may hold the
    others back, not proven yet; ranks that began to stand still late) is watched on, up to ONCE_LIMIT_S."""
    window = args.settle if args.settle is not None else args.stall + 2 * args.interval
    limit = window if args.settle is not None else max(window, ONCE_LIMIT_S)
    begun: float | None = None  # counted from the first sample, which can be slow on a loaded node

    def delay(state: WatchState | None, interval_s: float) -> float:  # never past the window, or the limit
        elapsed = time.monotonic() - (begun or 0.0)
        end = (window if elapsed < window else limit) - elapsed
        return float(max(min(next_delay(state, interval_s), end), 0))

    state: WatchState | None = None
    for look in samples(source, args.interval, threading.Event(), delay=delay, wait=lambda s: time.sleep(s)):
        state = look.state
        assert state is not None  # the loop raises what a poll raised
        begun = time.monotonic() if begun is None else begun
        if (elapsed := time.monotonic() - begun) >= limit:
            break
        if state.verdict.status == "finished" and not state.launcher_running:
            return state  # nothing left to watch; while the launcher lives, it may restart the ranks
        # answered early: judged as it stands, not against a window it did not wait for (a warning, or a dead rank,
        # only where nothing the ranks show may still turn into a dead rank or a straggler)
        if args.settle is None and decided(state) and stands(state, args.stall):
            return state
        if elapsed >= window and state.verdict.status != "pending":
            break
    assert state is not None and begun is not None
    watched = max(window, min(time.monotonic() - begun, limit))
    return source.with_flight(rejudge(state, source.judged(final=True, window_s=watched)))  # the exact word last
