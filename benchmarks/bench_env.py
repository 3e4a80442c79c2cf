"""How fast is ``ncclcheck env``? Measured against a bare ``import torch.distributed`` and
``python -m torch.utils.collect_env`` in the same run.

env imports torch.distributed in a child Python (so a torch that is installed but broken is
caught), so that import is its floor: the first ratio says what env adds to it. All three run as
fresh processes, in turn, several times; the report is the ratio of medians (lower is better) plus
the absolute medians for this machine. Usage: python benchmarks/bench_env.py [-n 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from _timing import wall  # benchmarks/ is on sys.path when run as a script

ENV = "ncclcheck env"
IMPORT = "import torch.distributed"
COLLECT = "torch collect_env"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5, help="runs of each command")
    runs = parser.parse_args().n
    commands: dict[str, tuple[list[str], tuple[int, ...]]] = {
        ENV: ([sys.executable, "-m", "ncclcheck", "env", "--json"], (0, 1)),
        IMPORT: ([sys.executable, "-c", "import torch.distributed"], (0,)),
        COLLECT: ([sys.executable, "-m", "torch.utils.collect_env"], (0,)),
    }
    for argv, ok in commands.values():
        wall(argv, ok=ok)  # warm the page cache for each; a failure stops the benchmark
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, ok) in commands.items():
            times[name].append(wall(argv, ok=ok))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores, python {platform.python_version()}")
    for name, value in med.items():
        print(f"{name:>24}: median {value * 1000:7.1f} ms over {runs} runs")
    print(f"{'ratio':>24}: ncclcheck env takes {med[ENV] / med[IMPORT]:.2f}x the time of a bare {IMPORT}")
    print(f"{'ratio':>24}: ncclcheck env takes {med[ENV] / med[COLLECT]:.2f}x the time of collect_env")
    return 0


if __name__ == "__main__":
    sys.exit(main())
