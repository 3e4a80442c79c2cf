"""How soon does ``ncclcheck run`` write the hang record with the exact cause, on jobs that hang in the code? Real
torchrun/gloo jobs (tests/workers/args_job.py) under ``python -m ncclcheck run --stall S`` with its default
--interval (5 s): the time from the moment every rank has printed "ready" (it blocks right after) to the hang
record on disk naming the right culprits. Goal: within S + 5 s. The baseline in the same run is reading the same
ranks by hand with ``py-spy dump --nonblocking``, one after the other (stacks only: no cause, no culprit).

Usage: python benchmarks/bench_run_verdict.py [--stall 10] [-n 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from _timing import by_hand  # benchmarks/ is on sys.path when run as a script

WORKERS = Path(__file__).resolve().parents[1] / "tests" / "workers"


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str
    nproc: int
    kind: str  # the hang record's first kind
    culprits: tuple[int, ...]
    script: str = "args_job.py"


SCENARIOS = (
    Scenario("sub-group skip after 3 steps (rank 3)", "skip", 4, "fr-not-joined", (3,), "subgroup_skip.py"),
    Scenario("p2p deadlock: both ranks recv first", "p2p_deadlock", 2, "p2p-deadlock", (0, 1)),
    Scenario("reduce, each rank its own dst (a tie)", "reduce_dst", 2, "root-mismatch", ()),
)


def one(s: Scenario, stall: float) -> tuple[float, float, str, bool]:
    """Seconds from stuck to the hang record, py-spy by hand, what the record says, and whether it is right."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp, "run")
        argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(run_dir), "--stall", str(stall), "--on-hang"]
        argv += ["exit", "--", sys.executable, "-m", "torch.distributed.run", "--standalone"]
        argv += [f"--nproc-per-node={s.nproc}", str(WORKERS / s.script)]
        out = Path(tmp, "out.log")
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "MODE": s.mode, "SLEEP_S": "0"}
            )
        try:
            deadline = time.monotonic() + 120
            while not all(f"ready {r}" in out.read_text(errors="replace") for r in range(s.nproc)):
                assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")[-2000:]
                time.sleep(0.05)
            stuck = time.monotonic()
            ranks = [p.pid for p in psutil.Process(proc.pid).children(recursive=True) if "RANK" in p.environ()]
            hand = by_hand(ranks)
            hangs = run_dir / "hangs"
            while not list(hangs.glob("hang-*.json")):
                assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")[-2000:]
                time.sleep(0.05)
            took = time.monotonic() - stuck
            proc.wait(120)
            report = json.loads((run_dir / "report.json").read_text())
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
    hang = report["hangs"][0]
    right = hang["kinds"][0] == s.kind and tuple(hang["culprits"]) == s.culprits
    return took, hand, f"{hang['kinds'][0]} {hang['culprits']}", right


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stall", type=float, default=10.0)
    parser.add_argument("-n", type=int, default=1, help="runs per scenario (the median is shown)")
    args = parser.parse_args()
    print(f"`ncclcheck run --stall {args.stall:g}` (default --interval 5): stuck -> hang record with the cause")
    wrong = 0
    for s in SCENARIOS:
        runs = [one(s, args.stall) for _ in range(args.n)]
        took, hand = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        right = all(r[3] for r in runs)
        wrong += not right
        print(
            f"  {s.name:<52} {took:5.1f} s (goal {args.stall + 5:g} s; py-spy by hand {hand * 1e3:4.0f} ms)"
            f"  -> {runs[-1][2]}{'' if right else '  WRONG'}"
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
