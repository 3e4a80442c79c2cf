"""How fast and how lean is ``ncclcheck logs``? Against ``grep -E`` with the catalogue's patterns, same file, same run.

Generates a multi-rank log (real NCCL/torch lines from ../shared/fixtures/nccl_logs, re-prefixed for
64 ranks on 8 hosts) of ``--size-mb`` MiB, then times ``ncclcheck logs --json`` and
``grep -E -c`` with every rule's literal, alternately. Reports throughput ratio (goal >= 0.25x of
grep) and ncclcheck's peak RSS (goal <= 150 MiB). Usage: python benchmarks/bench_logs.py [--size-mb 1024]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import wall  # benchmarks/ is on sys.path when run as a script

from ncclcheck.analysis.logs.rules import RULES

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nccl_logs"


def generate(path: Path, size_mb: int) -> None:
    lines = [
        line for p in sorted(FIXTURES.glob("*.log")) for line in p.read_text(errors="replace").splitlines() if line
    ]
    target, written, i = size_mb << 20, 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            block = []
            for line in lines:
                i += 1
                block.append(
                    f"[rank{i % 64}]:{line}\n"
                    if i % 3
                    else f"node{i % 8}:{1000 + i % 64}:{i % 97} [0] NCCL INFO Channel 00/0 : {i % 64}[0] -> {(i + 1) % 64}[0] via P2P/IPC\n"
                )
            chunk = "".join(block)
            out.write(chunk)
            written += len(chunk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("-n", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "job.log"
        generate(log, args.size_mb)
        size = log.stat().st_size / 2**20
        ours = [sys.executable, "-m", "ncclcheck", "logs", "--json", str(log)]
        grep = ["grep", "-E", "-c", *[x for r in {r.literal for r in RULES} for x in ("-e", r)], str(log)]
        times: dict[str, list[float]] = {"ncclcheck": [], "grep": []}
        for _ in range(args.n):
            times["ncclcheck"].append(wall(ours))
            times["grep"].append(wall(grep))
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"log: {size:.0f} MiB; ncclcheck {size / med['ncclcheck']:.1f} MiB/s, grep -E {size / med['grep']:.1f} MiB/s")
    print(f"throughput ratio: {med['grep'] / med['ncclcheck']:.2f}x of grep (goal >= 0.25x)")
    print(f"peak RSS of the children (ncclcheck is the larger): {peak_mib:.0f} MiB (goal <= 150 MiB)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
