"""How much does ncclcheck smoke add? Its per-op latency and its wall time, against a bare loop in the same run.

The bare loop (benchmarks/bare_loop.py) times the same ops and sizes with plain torch.distributed
under the same launcher; smoke adds verification, progress files and the watchdog. Both runs
alternate ``-n`` times; reported are the ratios of medians (goal: per-op latency <= 1.1x).
Usage: python benchmarks/bench_smoke.py [-n 3] [--sizes 1K,64K,1M] [--iters 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from _timing import wall  # benchmarks/ is on sys.path when run as a script

from ncclcheck.analysis.smoke.plan import OPS, parse_sizes

HERE = os.path.dirname(os.path.abspath(__file__))


def smoke_times(report_path: str) -> dict[str, float]:
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    return {f"{r['op']}@{r['bytes']}": r["time_us_p50"] for r in report["results"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--sizes", default="1K,64K,1M")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    sizes = ",".join(map(str, parse_sizes(args.sizes)))
    tmp = tempfile.mkdtemp(prefix="ncclcheck-bench-")
    bare_out, smoke_out = os.path.join(tmp, "bare.json"), os.path.join(tmp, "smoke.json")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    bare = [*torchrun, os.path.join(HERE, "bare_loop.py"), ",".join(OPS), sizes, str(args.iters), "2", bare_out]
    smoke = [sys.executable, "-m", "ncclcheck", "smoke", "--backend", "gloo", "--nproc", "2", "--sizes", sizes]
    smoke += ["--iters", str(args.iters), "--warmup", "2", "--json", smoke_out, "--log-dir", os.path.join(tmp, "logs")]
    walls: dict[str, list[float]] = {"bare": [], "smoke": []}
    ratios: dict[str, list[float]] = {}
    for _ in range(args.n):
        walls["bare"].append(wall(bare, check=True))
        walls["smoke"].append(wall(smoke, check=True))
        with open(bare_out, encoding="utf-8") as handle:
            base = json.load(handle)
        for key, ours in smoke_times(smoke_out).items():
            if key in base and base[key] > 0:
                ratios.setdefault(key, []).append(ours / base[key])
    print(f"{'op@bytes':>22}  smoke/bare p50 latency (median of {args.n} runs)")
    for key, values in ratios.items():
        print(f"{key:>22}  {statistics.median(values):.2f}x")
    overall = statistics.median([statistics.median(v) for v in ratios.values()])
    print(f"{'all ops (median)':>22}  {overall:.2f}x   goal <= 1.1x")
    wall_ratio = statistics.median(walls["smoke"]) / statistics.median(walls["bare"])
    print(
        f"{'wall time':>22}  {wall_ratio:.2f}x  (smoke {statistics.median(walls['smoke']):.1f} s,"
        f" bare loop {statistics.median(walls['bare']):.1f} s, same ops and sizes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
