"""Fail-slow: how soon ``ncclcheck watch`` names the rank that holds a job back, whether it names the right one, what
it says of a healthy job over a long run, and what watching costs. Every figure against a baseline in the same run.

1. Seconds to name the slow rank: a 3-rank gloo job (tests/workers/slow_job.py, 0.1 s of compute a step) whose last
   rank computes 3x, 1.5x and 1.2x as long; ``watch --once --json`` from its start until it answers (it stops as soon
   as it names a rank, or at ``--stall`` + 2 intervals); the share of runs that named rank 2 and nobody else. Goals:
   3x within 10 s and 1.5x within 20 s, right every time; 1.2x as far as it goes. Baseline: one py-spy dump of each
   rank by hand (stacks, no cause).
2. False findings over a healthy run: the same job balanced, watched for ``--healthy-s`` (default 600) at the default
   interval by the live source; every look counted, every warning or error found counted (goal: 0).
3. The watched job's slowdown: the steps/s of a 2-rank job with fixed compute a step (benchmarks/steady_job.py) while
   ``watch`` samples it at the default interval (py-spy dumps and the 10-a-second rounds of py-spy record), against
   the same job unwatched, alternately (goal: <= 2 %).
4. One refresh of the job-wide analysis at 4,096 ranks with a minute of rounds each (60 ms of it is the budget's
   baseline: the refresh before fail-slow, ``judge`` on the same views without rounds): with no new round, and
   when every rank's round has just arrived (goal: within the viewer's 100 ms).

  python benchmarks/bench_slow.py [-n 3] [--healthy-s 600] [--duration 30] [--only name,cost,healthy,refresh]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import contextlib

from _timing import by_hand
from watch_states import job, sample, stack

from ncclcheck.analysis.watch.judge import Judging, judge
from ncclcheck.analysis.watch.shares import rank_shares
from ncclcheck.analysis.watch.slow import slowness
from ncclcheck.analysis.watch.track import Tracked
from ncclcheck.collectors.jobs import discover
from ncclcheck.model.shares import Place, Tally, window
from ncclcheck.model.watch import RankView
from ncclcheck.sources.watch import LiveSource

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "tests" / "workers" / "slow_job.py"
TORCHRUN = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc-per-node=3",
    "--monitor-interval=600",
]


class Job:
    """The worker under torchrun, started and ended by the benchmark (its whole tree, whatever happens)."""

    def __init__(self, mode: str, **env: str) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="bench-slow-", suffix=".log", delete=False)  # noqa: SIM115
        environ = {**os.environ, "MODE": mode, **env}
        self.proc = subprocess.Popen(
            [*TORCHRUN, str(WORKER)], stdout=self.log, stderr=subprocess.STDOUT, env=environ, start_new_session=True
        )
        deadline = time.monotonic() + 120
        while Path(self.log.name).read_text(errors="replace").count("ready") < 3:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.end()
                raise SystemExit(f"the slow job did not start: {Path(self.log.name).read_text()[-400:]}")
            time.sleep(0.1)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def end(self) -> None:
        import psutil

        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for p in [*children, psutil.Process(self.proc.pid)] if self.proc.poll() is None else children:
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.proc.wait()
        os.unlink(self.log.name)


def time_to_name(factor: float) -> tuple[float, bool, str]:
    """Seconds from ``watch --once`` starting to its answer on a job whose rank 2 is ``factor`` times slower,
    whether it named rank 2 alone, and what it named."""
    j = Job("compute", FACTOR=str(factor))
    try:
        start = time.perf_counter()
        argv = [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(j.proc.pid)]
        done = subprocess.run([*argv, "--stall", "60"], capture_output=True, text=True, check=False, timeout=180)
        took = time.perf_counter() - start
        report = json.loads(done.stdout)
    finally:
        j.end()
    named = {f["kind"]: f["culprits"] for f in report["findings"]}
    return took, named == {"slow-rank": [2]}, json.dumps(named)


def by_hand_baseline() -> float:
    j = Job("compute", FACTOR="3")
    try:
        return by_hand([r.pid for r in discover(j.proc.pid)[0].ranks])
    finally:
        j.end()


def healthy(seconds: float, interval: float = 1.5) -> tuple[int, int, list[str]]:
    """Looks taken of a balanced job over ``seconds``, the looks with a warning or an error, and what they said."""
    j = Job("healthy")
    source = LiveSource(discover(j.proc.pid)[0], 60.0)
    looks, bad, said = 0, 0, []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            state = source.poll()
            looks += 1
            wrong = [f for f in state.findings if f.severity in ("error", "warning")]
            if wrong:
                bad += 1
                said.append(f"{wrong[0].id}: {wrong[0].message[:160]}")
            time.sleep(interval)
    finally:
        source.close()
        j.end()
    return looks, bad, said


def step_rate(duration: float, watched: bool) -> tuple[float, float]:
    """steps/s of a 2-rank gloo job with a fixed amount of compute a step (benchmarks/steady_job.py: on 2 cores,
    CPU that watching takes is taken from its ranks) over ``duration`` s, watched at the default interval or not;
    and the watcher's CPU (py-spy included) as a share of one core."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(HERE / "steady_job.py"),
    ]
    launched = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "DURATION": str(duration)},
    )
    watcher, used, began = None, 0.0, time.monotonic()
    try:
        if watched:
            deadline = time.monotonic() + 60
            while not (jobs := discover(launched.pid)) or len(jobs[0].ranks) < 2:
                if time.monotonic() > deadline:
                    raise SystemExit("the steady job's ranks did not start")
                time.sleep(0.1)
            cmd = [sys.executable, "-m", "ncclcheck", "watch", "--once", "--pid", str(launched.pid), "--stall", "60"]
            watcher = subprocess.Popen([*cmd, "--settle", str(duration + 30)], stdout=subprocess.DEVNULL)
            began = time.monotonic()
        out, _ = launched.communicate(timeout=duration + 120)
        if watcher is not None:
            import psutil

            times = psutil.Process(watcher.pid).cpu_times()
            used = (times.user + times.system + times.children_user + times.children_system) / (
                time.monotonic() - began
            )
    finally:
        for proc in (watcher, launched):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("steps/s"))), used * 100


def refresh(world: int = 4096, rounds: int = 29) -> tuple[float, float, float]:
    """ms of one refresh's analysis (``judge``, which runs the fail-slow analysis, and the shares) at ``world``
    ranks holding a minute of rounds: with no new round, when every rank's round has just arrived, and the baseline
    (``judge`` on the same views without rounds)."""
    rng = random.Random(3)
    views = [_view(r, 0.0 if r == 1234 else 0.33, rounds, rng) for r in range(world)]
    j = job(world)
    judging = Judging(10.0)

    def once(vs: list[RankView]) -> float:
        start = time.perf_counter()
        judge(Tracked(100.0, 60.0, 40, tuple(vs), True, True), j, judging)
        rank_shares(vs)
        return (time.perf_counter() - start) * 1000

    bare = [dataclasses.replace(v, tallies=()) for v in views]
    base = statistics.median(once(bare) for _ in range(5))
    once(views)
    same = statistics.median(once(views) for _ in range(5))
    arrived = []
    for _ in range(5):
        views = [dataclasses.replace(v, tallies=window(v.tallies, [next_round(v.tallies[-1], rng)])) for v in views]
        arrived.append(once(views))
    assert [f.culprits for f in slowness(views, False)] == [(1234,)], "the refresh benchmark lost its slow rank"
    return same, statistics.median(arrived), base


def _view(rank: int, share: float, n: int, rng: random.Random) -> RankView:
    s = dataclasses.replace(sample(rank, stack("all_reduce")), net_bytes=rank)
    tallies: list[Tally] = []
    for _ in range(n):
        tallies.append(next_round(tallies[-1] if tallies else None, rng, share))
    return RankView(s, "all_reduce", None, "all_reduce", 0, 0, 0, 0, 0, 50.0, True, 3, tallies=tuple(tallies))


def next_round(last: Tally | None, rng: random.Random, share: float | None = None) -> Tally:
    """The round after ``last`` (2.05 s later), 20 samples drawn at ``share`` (``last``'s own share if None)."""
    if share is None and last is not None:
        share = last.waited / last.samples if last.samples else 0.0
    share = 0.33 if share is None else share
    waited = sum(rng.random() < share for _ in range(20))
    start = last.end + 0.05 if last is not None else 1000.0
    kinds = (("collective", waited), ("other", 20 - waited))
    places = (
        Place("collective", "all_reduce", "/job/train.py:83 (main)", waited),
        Place("other", "compute", "/job/train.py:32 (compute)", 20 - waited),
    )
    return Tally(start, start + 2.0, 20, kinds, places, 2.0 - waited / 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--healthy-s", type=float, default=600.0, help="seconds the healthy job is watched")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of each step-rate run")
    parser.add_argument("--only", default="name,cost,healthy,refresh")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "refresh" in only:
        same, arrived, base = refresh()
        print(
            f"refresh at 4,096 ranks with a minute of rounds each: {same:.0f} ms (no new round), {arrived:.0f} ms "
            f"(every rank's round just arrived); the refresh before fail-slow (judge without rounds): {base:.0f} ms"
        )
    if "name" in only:
        hand = by_hand_baseline()
        print(f"baseline: py-spy dump of the 3 ranks by hand {hand:.2f} s (stacks only: no cause, no culprit)")
        for factor in (3.0, 1.5, 1.2):
            runs = [time_to_name(factor) for _ in range(args.n)]
            right = sum(ok for _, ok, _ in runs)
            times = ", ".join(f"{t:.1f}" for t, _, _ in runs)
            wrong = "; ".join(named for _, ok, named in runs if not ok)
            print(
                f"{factor:g}x: rank 2 named in {right}/{len(runs)} runs; seconds to the answer {times} "
                f"(median {statistics.median(t for t, _, _ in runs):.1f})"
                + (f"; otherwise said: {wrong}" if wrong else "")
            )
    if "cost" in only:
        bare, watched, cpu = [], [], []
        for _ in range(args.n):
            bare.append(step_rate(args.duration, False)[0])
            rate, used = step_rate(args.duration, True)
            watched.append(rate)
            cpu.append(used)
        b, w = statistics.median(bare), statistics.median(watched)
        print(
            f"step rate: {b:.2f} steps/s bare ({', '.join(f'{x:.2f}' for x in bare)}), {w:.2f} watched "
            f"({', '.join(f'{x:.2f}' for x in watched)}): slowdown {(b - w) / b * 100:+.1f} %; the watcher, py-spy "
            f"included, used {statistics.median(cpu):.1f} % of one core ({', '.join(f'{x:.1f}' for x in cpu)})"
        )
    if "healthy" in only:
        looks, bad, said = healthy(args.healthy_s)
        print(f"healthy job watched {args.healthy_s:.0f} s: {looks} looks, {bad} with a finding")
        for line in said[:5]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
