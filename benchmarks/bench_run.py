"""``ncclcheck run`` against bare torchrun: the same 2-rank gloo job's step rate, runs alternating in one process
(bare, run, bare, run, ...), and the CPU ncclcheck run used beside it (its sampler and py-spy included).

  python benchmarks/bench_run.py [--duration 20] [-n 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
EXTRA: list[str] = []  # run's own options (--no-control: without the control plane hook)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def step_rate(duration: float, under_run: bool) -> tuple[float, float]:
    """The job's steps/s, and the CPU seconds spent outside the ranks (torchrun's agent; under run, ncclcheck too)."""
    cmd = [*TORCHRUN, str(HERE / "steady_job.py")]
    env = {**os.environ, "DURATION": str(duration)}
    with tempfile.TemporaryDirectory() as run_dir:
        argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", run_dir, *EXTRA, "--", *cmd] if under_run else cmd
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=duration + 180, check=True).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ranks = sum(float(line.split()[1]) for line in out.splitlines() if line.startswith("cpu_s "))
    return _rate(out), max(total - ranks, 0.0)


def _rate(out: str) -> float:
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("steps/s")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--run-options", default="", help="ncclcheck run's own options, e.g. --no-control")
    args = parser.parse_args()
    EXTRA.extend(args.run_options.split())
    bare, ran, cpu = [], [], []
    for _ in range(args.n):
        rate, agent = step_rate(args.duration, False)
        bare.append(rate)
        rate, used = step_rate(args.duration, True)
        ran.append(rate)
        cpu.append(used - agent)  # what ncclcheck run adds beyond torchrun's own agent
        time.sleep(1)
    b, r = statistics.median(bare), statistics.median(ran)
    print(f"bare torchrun: {b:.0f} steps/s (runs {', '.join(f'{x:.0f}' for x in bare)})")
    print(
        f"under ncclcheck run: {r:.0f} steps/s (runs {', '.join(f'{x:.0f}' for x in ran)}); "
        f"{100 * (r - b) / b:+.1f} % (goal: no more than 1 % slower)"
    )
    print(f"ncclcheck run's own CPU: {statistics.median(cpu) / args.duration * 100:.1f} % of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
