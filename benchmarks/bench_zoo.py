"""How fast are the zoo's hangs answered, and right? Each case of tests/integration/run/test_zoo.py, a real torchrun/gloo job under
``ncclcheck run --stall S --interval 5`` (the defaults but --stall, as a user runs it), hung since its ranks printed
"ready":

- run: seconds from the hang's start ("ready") to its hang record's appearance (goal: --stall + 5 s);
- watch: ``python -m ncclcheck watch --once --json --pid TORCHRUN`` (default settings: --stall 10), started once the
  job has been stuck STUCK_FOR_S; its wall time, interpreter start-up included (goal: 3 s where the graph is complete
  at the first look: a mismatch, a deadlock, start-up, group creation, point-to-point; --stall + 2 s for a straggler);
- by hand: ``py-spy dump --nonblocking`` of each rank one after the other, in the same run (stacks only: no cause).
Each answer's finding and culprits are checked against the case's truth.

Usage: python benchmarks/bench_zoo.py [--stall 10] [--only CASE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _timing import by_hand  # benchmarks/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "run"))
from test_zoo import _first_hang, await_ready, under_run, watch_once  # the zoo's own launcher helpers
from zoo_cases import ZOO, Truth  # the cases and their truth

STUCK_FOR_S = 3.0


def measure(case: str, truth: Truth, stall: float, work: Path) -> dict[str, object]:
    log = work / case / "run.log"
    run = under_run(case, truth.nproc, work / case, stall=f"{stall:g}", interval="5")
    result: dict[str, object] = {"case": case}
    try:
        await_ready(run, log, truth.nproc)
        if run.poll() is not None:
            raise SystemExit(f"{case}: the job ended before it hung")
        hung = time.monotonic()
        hangs = work / case / "run" / "hangs"
        seen: list[float] = []  # when run's record appeared, watched from the hang's start on

        def look() -> None:
            while not any(hangs.glob("*.json")) and time.monotonic() - hung < stall + 60 and run.poll() is None:
                time.sleep(0.05)
            seen.append(time.monotonic() - hung)

        watcher = threading.Thread(target=look, daemon=True)
        watcher.start()
        time.sleep(STUCK_FOR_S)
        launcher = next(
            c for c in psutil.Process(run.pid).children() if "torch.distributed.run" in " ".join(c.cmdline())
        )
        result["by_hand_s"] = by_hand([c.pid for c in launcher.children()])
        begin = time.perf_counter()
        watch = watch_once(launcher.pid, case)  # watch's defaults: --stall 10
        result["watch_s"] = time.perf_counter() - begin
        found = _first_hang(json.loads(watch.stdout)["findings"]) if watch.stdout.startswith("{") else None
        result["watch_right"] = found is not None and (found["kind"], tuple(found["culprits"])) == (
            truth.kind,
            truth.culprits,
        )
        result["watch_said"] = f"{found['kind']} {found['culprits']}" if found else "nothing"
        watcher.join()
        records = sorted(hangs.glob("*.json"))
        result["run_s"] = seen[0] if records else None
        first = _first_hang(json.loads(records[0].read_text())["findings"]) if records else None
        result["run_right"] = first is not None and (first["kind"], tuple(first["culprits"])) == (
            truth.kind,
            truth.culprits,
        )
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            try:
                run.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall", type=float, default=10.0, help="run's --stall (watch keeps its default, 10 s)")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ncc-bench-zoo-"))
    print(f"| case | run: hang to record (goal {args.stall:g} + 5 s) | watch --once | py-spy by hand | said |")
    print("|---|---|---|---|---|")
    for case, truth in ZOO.items():
        if truth.crash or (args.only and case not in args.only):
            continue
        r = measure(case, truth, args.stall, work)
        run_s = f"{r['run_s']:.1f} s" if isinstance(r["run_s"], float) else "none"
        right = "" if r["watch_right"] and r["run_right"] else " (WRONG)"
        print(
            f"| {case} | {run_s} | {r['watch_s']:.1f} s | {r['by_hand_s'] * 1000:.0f} ms | {r['watch_said']}{right} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
