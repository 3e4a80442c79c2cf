"""``ncclcheck watch --slurm/--fanout/--agents``: every node of a job in one view, from one agent per node.

The agents are started through tools the cluster already has (srun, pdsh, clush, ssh, kubectl exec) and
speak on their stdout; nothing listens on a port and nothing is written into the job. The fan-out's whole
process tree ends with the viewer (q, ^C, SIGTERM, SIGHUP, an error). Exit codes as ``watch``'s, and 2
when the fan-out cannot be started (no srun, no job id).
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import threading
import time
from types import FrameType

from ncclcheck import exits
from ncclcheck.analysis.watch.judge import decided, stands
from ncclcheck.analysis.watch.nodes import SILENT_MIN_S
from ncclcheck.analysis.watch.slow import SLOW
from ncclcheck.collectors.agent_commands import agent_command, fanout_command, slurm_command, slurm_nodes
from ncclcheck.collectors.agent_streams import FanOut
from ncclcheck.exits import UsageError
from ncclcheck.model.watch import WatchState
from ncclcheck.signals import handling
from ncclcheck.sources.live import samples
from ncclcheck.sources.watch_nodes import NodesSource
from ncclcheck.views.console import make_console
from ncclcheck.views.watch import render, to_json


def run(args: argparse.Namespace, live: bool) -> int:
    try:
        source = _source(args)
    except (OSError, ValueError) as exc:
        raise UsageError(f"ncclcheck watch: {exc}") from None
    try:
        with handling(handler=_interrupt):
            if live:
                from ncclcheck.tui.app import WatchApp  # textual only when there is a terminal

                app = WatchApp(source, args.interval, several_nodes=True, samples=samples)
                freeze_start_up()
                app.run()
                return exits.INTERRUPTED if app.return_code == exits.INTERRUPTED else exits.OK
            state = _once(source, args)
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    finally:
        source.close()
    if args.json:
        print(json.dumps(to_json(state, args.interval), indent=1))
    else:
        render(state, make_console())
    if not state.ranks and not any(n.agent == "ok" for n in state.nodes):
        return exits.NO_JOB if not state.findings else exits.PROBLEM
    return exits.watch(state.verdict.status, (f.severity for f in state.findings))


FULL_EVERY = 100  # collections of the middle generation between two full ones (CPython's default: 10)


def freeze_start_up() -> None:
    """Leave what start-up made (modules, the app) out of the garbage collector's walks from now on: a refresh of
    thousands of ranks makes tens of thousands of objects, and each full collection they set off would walk every
    module's objects again (a third of a 4,096-rank refresh's CPU: docs/benchmarks.md). And collect in full ten
    times less often: the viewer holds a minute of every rank's rounds, a large set of long-lived objects without
    cycles that each full collection walks for nothing (measured at 4,096 ranks: a refresh in which every rank's
    round arrives went from about 410 ms to 290; cyclic garbage, which the viewer makes little of, waits longer)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the finally above ends the fan-out


def _source(args: argparse.Namespace) -> NodesSource:
    if args.agents and args.follow:
        files = sorted(glob.glob(args.agents))
        if not files:
            raise ValueError(f"--agents {args.agents}: no such file (agent lines, e.g. a run dir's watch-agent.jsonl)")
        return NodesSource(args.stall, args.interval, FanOut(["tail", "-q", "-n", "+1", "-F", *files]))
    if args.agents:
        if args.agents != "-" and not os.path.isfile(args.agents):
            raise ValueError(f"--agents {args.agents}: no such file (agent lines, one JSON object per line)")
        return NodesSource.from_file(args.agents, args.stall, args.interval)
    if args.fanout:
        agent = agent_command(args.interval, args.stall, args.job, args.native, args.no_stacks, args.agent_cmd)
        return NodesSource(args.stall, args.interval, FanOut(fanout_command(args.fanout, agent), shell=True))
    job_id = args.slurm or os.environ.get("SLURM_JOB_ID", "")
    if not job_id:
        raise ValueError(
            "--slurm needs a job id (none given and $SLURM_JOB_ID is not set): ncclcheck watch --slurm JOBID"
        )
    if shutil.which("srun") is None:
        raise ValueError(
            "--slurm: srun is not on PATH (run the viewer on a login node of the cluster, or use --fanout)"
        )
    hosts = slurm_nodes(job_id)
    agent = agent_command(args.interval, args.stall, args.job, args.native, args.no_stacks, args.agent_cmd, job_id)
    argv, env = slurm_command(job_id, len(hosts) or None, agent)
    return NodesSource(args.stall, args.interval, FanOut(argv, env=env), expected_hosts=hosts)


def _once(source: NodesSource, args: argparse.Namespace) -> WatchState:
    """Sample until the answer is clear (without --settle) or the window ends, counted from the first line of
    any agent (srun and ssh take a while to start them); then judge the window."""
    window = args.settle if args.settle is not None else args.stall + 2 * args.interval
    begun = time.monotonic()
    first: float | None = None
    for look in samples(source, args.interval, threading.Event(), wait=lambda s: time.sleep(s)):
        state = look.state
        assert state is not None  # the loop raises what a poll raised
        if source.ended():
            break  # recorded lines, or every agent ended: judge what came
        if state.ranks and first is None:
            first = time.monotonic()
        if first is not None and time.monotonic() - first >= window and state.verdict.status != "pending":
            break  # pending: the fan-out is still within its start-up grace; a node may yet come
        if time.monotonic() - begun > window + 2 * SILENT_MIN_S:
            break  # no agent reported at all, or one never did: the final poll names what is missing
        if state.verdict.status == "finished" and not state.launcher_running:
            return source.poll() if source.with_map() else state
        # node warnings come at once: one is the answer once --stall has passed here and as the ranks show it (a
        # slow rank or node is judged over its own window already, every part of it)
        judged = first is not None and time.monotonic() - first >= args.stall
        slow = all(f.id in SLOW for f in state.findings if f.severity == "warning")
        warned = judged or slow
        if (
            args.settle is None
            and decided(state)
            and stands(state, args.stall)
            and (state.verdict.status != "warning" or warned)
        ):
            return source.poll() if source.with_map() else state  # the answer carries torchrun's map too
    source.with_map()
    return source.poll(final=True)
