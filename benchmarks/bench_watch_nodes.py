"""What does watching every node cost? Two numbers, each against a baseline in the same run.

1. The viewer, per refresh at 512 and 1,024 nodes x 8 ranks (4,096 and 8,192 ranks), from recorded agent streams:
   reading one new line from every node (stacks unchanged, as agents send them), the job-wide merge and analysis,
   the rank table's update and the screen's render in the real Textual app, as CPU time (goal <= 100 ms at 4,096);
   the baseline is json.loads of the same lines alone, timed right after each refresh. Twice: a straggler (rank 1
   outside any collective), and a job that runs with rank 1 slow (fail-slow), each node's line carrying a new round
   of sampled stacks for every rank and the viewer holding a minute of them: the refresh in which every rank's round
   arrives. The lines are written as the agents write them (``AgentLines``, schema /3: a rank whose state is as last
   sent comes as a row of its numbers, its new rounds after them). Median and mean of the refreshes (a full garbage
   collection falls in some of them).
2. The agent on a real 8-rank gloo job stuck in a collective (so that every rank is dumped at every
   sample, the agent's worst case) at the default interval: its CPU (py-spy included) as a share of one
   core (goal <= 2 %), and the bytes it writes per sample and per rank.
Usage: python benchmarks/bench_watch_nodes.py [--nodes 512,1024] [--seconds 30] [--viewer-only]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "watch"))
from bench_slow import next_round
from bench_watch import Frozen
from test_watch_real import stop_tree
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.commands.watch.nodes import freeze_start_up
from ncclcheck.model.agent_line import REPEAT, AgentLines
from ncclcheck.model.shares import Tally
from ncclcheck.sources.live import samples
from ncclcheck.tui.app import WatchApp

WORKER = Path(__file__).resolve().parents[1] / "tests" / "workers" / "watch_job.py"
PER_NODE = 8


def recorded(nodes: int, rounds: int, slow: bool = False) -> list[list[str]]:
    """``rounds`` lines per node, as each node's agent would write them (the first with stacks). ``slow``: every
    rank moving, rank 1 the others wait for; the first line carries a minute of rounds, each next one a new round."""
    world = nodes * PER_NODE
    out: list[list[str]] = [[] for _ in range(rounds)]
    rng = random.Random(5)
    for node in range(nodes):
        first = node * PER_NODE
        odd = {"r1": sample(1, stack(None, 41, "load_batch"))} if node == 0 and not slow else {}
        state = states(job(world, PER_NODE, node), *[all_in(first + PER_NODE, "all_reduce", first=first, **odd)] * 3)
        lines = AgentLines(f"gpu-{node:04d}")
        history: dict[int, list[Tally]] = {}
        for i in range(rounds):
            if slow:
                views = []
                for v in state.ranks:
                    kept = history.setdefault(v.rank, [])
                    for _ in range(29 if i == 0 else 1):
                        kept.append(next_round(kept[-1] if kept else None, rng, 0.0 if v.rank == 1 else 0.33))
                    moving = dataclasses.replace(v, since_s=0.0, still_s=0.0, quiet_s=0.0, idle_s=0.0, progressing=True)
                    views.append(dataclasses.replace(moving, moved_samples=3, tallies=tuple(kept[-30:])))
                state = dataclasses.replace(state, ranks=tuple(views), recording=True)
            at = 1.8e9 + i * 1.5
            out[i].append(json.dumps(lines.line(state, at)))
    return out


def viewer_cost(nodes: int, refreshes: int = 8, slow: bool = False) -> tuple[float, float, float]:
    """Median CPU ms per refresh (read + merge + analysis + table + render), its mean, and json.loads' median."""
    lines = recorded(nodes, REPEAT + refreshes, slow)
    freeze_start_up()  # as the viewer does before its first refresh
    streams = Streams()
    for line in (line for first in lines[:REPEAT] for line in first):  # each rank's first full entry, and its repeats
        streams.add_line(line, 1.8e9)
    judging = Judging(10.0)
    state = merge(streams.reports, streams.text, 1.8e9 + (REPEAT - 1) * 1.5, judging, 1.5)
    ours: list[float] = []
    base: list[float] = []

    async def drive() -> None:
        source = Frozen(state)
        app = WatchApp(source, 3600.0, clock=lambda: 0.0, several_nodes=True, samples=samples)
        async with app.run_test(size=(150, 40)) as pilot:
            await pilot.pause()
            for i in range(REPEAT, REPEAT + refreshes):  # the steady state: rows, each with its new round
                now = 1.8e9 + i * 1.5
                start = time.process_time()
                for line in lines[i]:
                    streams.add_line(line, now)
                app.state = merge(streams.reports, streams.text, now, judging, 1.5)
                app.refresh_view()
                await pilot.pause()
                ours.append(time.process_time() - start)
                start = time.process_time()
                _ = [json.loads(line) for line in lines[i]]
                base.append(time.process_time() - start)
            assert len(app.state.ranks) == nodes * PER_NODE and app.state.findings[0].culprits == (1,)
            assert app.state.findings[0].id == ("slow-rank" if slow else "straggler"), app.state.findings[0]
            source.done.set()

    asyncio.run(drive())
    return statistics.median(ours) * 1e3, statistics.mean(ours) * 1e3, statistics.median(base) * 1e3


def agent_cost(seconds: float) -> tuple[float, float, float]:
    """The agent's CPU share of one core (children included), bytes per line, bytes per rank per line."""
    log_path = Path(f"/tmp/ncclcheck-bench-nodes-{os.getpid()}.log")
    log = log_path.open("w")
    job_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={PER_NODE}",
            "--master-port=29571",
            str(WORKER),
        ],
        env={**os.environ, "MODE": "straggler", "STUCK_RANK": "7"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while log_path.read_text(errors="replace").count("ready") < PER_NODE:
            if job_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {PER_NODE}-rank job did not get ready: see {log_path}")
            time.sleep(0.2)
        agent = subprocess.Popen(
            [sys.executable, "-m", "ncclcheck", "watch", "--agent", "--pid", str(job_proc.pid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert agent.stdout is not None
        watcher = psutil.Process(agent.pid)
        sizes: list[int] = []
        used = 0.0
        end = time.monotonic() + seconds
        first = True
        while time.monotonic() < end:
            line = agent.stdout.readline()
            if first:  # start-up (imports, the first dumps) is not the steady cost
                first, start, before = False, time.monotonic(), _cpu(watcher)
                continue
            sizes.append(len(line))
            used = _cpu(watcher)
        wall = time.monotonic() - start
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
        return (used - before) / wall * 100, statistics.median(sizes), statistics.median(sizes) / PER_NODE
    finally:
        stop_tree(job_proc)  # each rank has its own session: the launcher's group alone would leave them
        log.close()
        log_path.unlink(missing_ok=True)


def _cpu(proc: psutil.Process) -> float:
    """CPU seconds of the agent and of the py-spy children it has now (ended children are counted by the
    kernel in the agent's children times)."""
    total = sum(proc.cpu_times()[:4])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", default="512,1024", help="node counts (8 ranks each), comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--viewer-only", action="store_true", help="leave out the agent on a real job")
    args = parser.parse_args()
    for nodes in (int(n) for n in args.nodes.split(",")):
        for slow, what in ((False, "a straggler"), (True, "rank 1 slow, every rank's round arriving")):
            cost, mean, base = min(viewer_cost(nodes, slow=slow) for _ in range(3))
            print(
                f"viewer refresh at {nodes} nodes x {PER_NODE} ranks ({nodes * PER_NODE} ranks), {what}: {cost:.1f} ms"
                f" CPU, mean {mean:.1f} (goal <= 100 ms at 4,096 ranks); json.loads of the lines alone {base:.1f} ms,"
                f" ratio {cost / base:.1f}x (best of 3)"
            )
    if args.viewer_only:
        return 0
    share, per_line, per_rank = agent_cost(args.seconds)
    print(
        f"agent on a stuck {PER_NODE}-rank job at the default interval: {share:.1f}% of one core (goal <= 2%),"
        f" {per_line:.0f} bytes per sample, {per_rank:.0f} bytes per rank"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
