"""Watch a running or stuck distributed job on this node: every rank's collective, call site and state.

Attaches with no code change: ranks are found by their environment (RANK, WORLD_SIZE, ...), stacks
are read with py-spy --nonblocking (the job is never paused, slowed or signalled; --native, which
adds C/C++ frames, is the exception: py-spy pauses each rank briefly to unwind them). Without a
terminal, or with --once, samples for --settle seconds and prints once. Exit code (--once): 0 no
finding, 1 findings, 2 usage error (e.g. several jobs and no --job), 3 no job found; the live view
exits 0 on q.

examples:
  ncclcheck watch                       # the live view (q quits, p pauses, s sorts, f flagged only, d saves)
  ncclcheck watch --once --json --settle 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ncclcheck.collectors.jobs import discover
from ncclcheck.collectors.watch_source import LiveSource
from ncclcheck.views.console import make_console
from ncclcheck.views.watch_report import render, to_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", metavar="ID", help="the job to watch when several run on this node")
    parser.add_argument("--pid", type=int, help="a launcher (torchrun) or rank process of the job")
    parser.add_argument(
        "--interval", type=float, default=1.5, metavar="S", help="seconds between samples (default 1.5)"
    )
    parser.add_argument(
        "--stall", type=float, default=10.0, metavar="S", help="no progress for this long counts (default 10)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        metavar="S",
        help="--once: sample this long after the first sample, at least twice (default: --stall + 2 intervals)",
    )
    parser.add_argument("--once", action="store_true", help="sample, print once and exit (also without a terminal)")
    parser.add_argument("--json", action="store_true", help="print the ncclcheck.watch/1 JSON (implies --once)")
    parser.add_argument("--no-stacks", action="store_true", help="psutil only, no py-spy")
    parser.add_argument(
        "--native",
        action="store_true",
        help="C/C++ frames too (where NCCL or gloo waits); py-spy must pause each rank briefly to unwind"
        " them, so this is the one mode that stops the job for a moment at every sample",
    )


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0 or args.stall < 0 or (args.settle is not None and args.settle < 0):
        print("ncclcheck watch: --interval must be > 0, --stall and --settle >= 0", file=sys.stderr)
        return 2
    if args.native and args.no_stacks:
        print("ncclcheck watch: --native needs stacks; drop --no-stacks", file=sys.stderr)
        return 2
    jobs = discover(args.pid)
    if args.job:
        jobs = tuple(j for j in jobs if j.id == args.job)
    if not jobs:
        what = f"job {args.job}" if args.job else f"pid {args.pid}" if args.pid else "torch distributed job"
        print(f"ncclcheck watch: no {what} found on this node (rank processes carry RANK and WORLD_SIZE; "
              "run as the job's user or root)", file=sys.stderr)  # fmt: skip
        return 3
    if len(jobs) > 1:
        print("ncclcheck watch: several jobs on this node; pick one with --job ID:", file=sys.stderr)
        for job in jobs:
            print(
                f"  {job.id}  world size {job.world_size}, ranks {','.join(str(r.rank) for r in job.ranks)}",
                file=sys.stderr,
            )
        return 2
    source = LiveSource(jobs[0], args.stall, stacks=not args.no_stacks, native=args.native)
    if args.once or args.json or not sys.stdout.isatty():
        return _once(source, args)
    from ncclcheck.tui.app import WatchApp  # textual only when there is a terminal

    WatchApp(source, args.interval).run()
    return 0  # quitting the live view is not a verdict; scripts use --once


def _once(source: LiveSource, args: argparse.Namespace) -> int:
    settle = args.settle if args.settle is not None else args.stall + 2 * args.interval
    state = source.poll()
    # Counted from the first sample, and never fewer than two: standing still is a difference between
    # samples, and on a loaded node (or with --native) one sample can take longer than the whole window.
    deadline = time.monotonic() + settle
    while True:
        time.sleep(min(args.interval, max(deadline - time.monotonic(), 0)))
        state = source.poll()
        if time.monotonic() >= deadline:
            break
    if args.json:
        print(json.dumps(to_json(state, args.interval, source.samples), indent=1))
    else:
        render(state, make_console())
    return 1 if state.findings else 0
