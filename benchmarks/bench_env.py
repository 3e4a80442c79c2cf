"""How fast is ``ncclcheck env``? Measured against ``python -m torch.utils.collect_env`` in the same run.

Both run as fresh processes, alternately, several times; the report is the ratio of medians
(lower is better) plus the absolute medians for this machine. Usage: python benchmarks/bench_env.py [-n 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _timing import wall  # benchmarks/ is on sys.path when run as a script


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5, help="runs of each command")
    runs = parser.parse_args().n
    ours = [sys.executable, "-m", "ncclcheck", "env", "--json"]
    baseline = [sys.executable, "-m", "torch.utils.collect_env"]
    wall(ours, ok=(0, 1)), wall(baseline, ok=(0,))  # warm the page cache for both; a failure stops the benchmark
    times: dict[str, list[float]] = {"ncclcheck env": [], "torch collect_env": []}
    for _ in range(runs):
        times["ncclcheck env"].append(wall(ours, ok=(0, 1)))
        times["torch collect_env"].append(wall(baseline, ok=(0,)))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, value in med.items():
        print(f"{name:>18}: median {value * 1000:7.1f} ms over {runs} runs")
    print(
        f"{'ratio':>18}: ncclcheck env takes {med['ncclcheck env'] / med['torch collect_env']:.2f}x the time of collect_env"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
