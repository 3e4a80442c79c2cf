"""What ``ncclcheck run``'s point-to-point record costs a job: two gloo ranks trading a small tensor (send, recv,
isend, irecv) many times, under plain torchrun and with run's hook on the PYTHONPATH (its wrappers around c10d's
send/recv/isend/irecv), in alternating pairs of runs; the time per op of each, and the difference.

Usage: python benchmarks/bench_hook_p2p.py [--pairs 5] [--rounds 5000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ncclcheck.collectors import control_hook, control_hook_p2p

WORKER = Path(__file__).resolve().parent / "p2p_pingpong.py"


def once(rounds: int, hook: Path | None) -> float:
    env = {**os.environ, "ROUNDS": str(rounds)}
    if hook is not None:
        env["PYTHONPATH"] = str(hook)
        env["NCCLCHECK_CONTROL_DIR"] = str(hook.parent)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("seconds "))
    return float(line.split()[1]) / (rounds * 2)  # two ops per round on each rank


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ncc-hook-"))
    hook = work / "control" / "hook"
    hook.mkdir(parents=True)
    os.chmod(work / "control", 0o700)
    shutil.copyfile(control_hook.__file__, hook / "sitecustomize.py")
    shutil.copyfile(control_hook_p2p.__file__, hook / "ncclcheck_hook_p2p.py")
    plain, hooked = [], []
    for _ in range(args.pairs):
        plain.append(once(args.rounds, None))
        hooked.append(once(args.rounds, hook))
    p, h = statistics.median(plain), statistics.median(hooked)
    print(
        f"per op, median of {args.pairs} runs of {args.rounds} rounds: plain {p * 1e6:.1f} us, with the hook "
        f"{h * 1e6:.1f} us ({(h - p) * 1e6:+.1f} us, {(h / p - 1) * 100:+.1f} %); "
        f"runs: plain {[round(x * 1e6, 1) for x in plain]}, hook {[round(x * 1e6, 1) for x in hooked]}"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
