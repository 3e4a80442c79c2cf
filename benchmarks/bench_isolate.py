"""How many stages does ``smoke --isolate`` need to name one bad node or link, as the cluster grows?

The plan (ncclcheck/analysis/smoke/isolate.py, pure) is run against simulated clusters of N nodes, each with one
planted fault at every position (at most 16 positions per N): a node whose network fails (passes alone, fails with
any other), a rate-limited node (completes with others at 1 % of the busbw), a dropped link between two nodes,
and a healthy cluster. Reported per N and fault: the most stages any position took, and the verdict's kind where
it was not the planted one (never, or the plan is wrong). The baseline is what the pairwise sweeps that operators
script today run to cover every pair (round-robin pairing: N-1 rounds of N/2 disjoint pairs at a time); the ratio
is stages / baseline rounds.
Usage: python benchmarks/bench_isolate.py [--nodes 4,8,16,...]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ncclcheck.analysis.smoke.isolate import next_step
from ncclcheck.model.isolate import HEALTHY, LINK, NODE, GroupRun, IsolateVerdict, StageResult


@dataclass(frozen=True)
class Fault:
    kind: str  # network, slow, link, healthy
    at: tuple[int, ...]

    def run(self, group: tuple[int, ...]) -> GroupRun:
        if len(group) == 1:
            return GroupRun(group, True)
        members = set(group)
        if (self.kind == "network" and members & set(self.at)) or (self.kind == "link" and set(self.at) <= members):
            return GroupRun(group, False, (), "no rank started")
        busbw = 0.01 if self.kind == "slow" and members & set(self.at) else 1.0 * (1 + 0.05 * (sum(group) % 3))
        return GroupRun(group, True, (("all_reduce", busbw),))


def stages(n: int, fault: Fault) -> tuple[int, IsolateVerdict]:
    done: list[StageResult] = []
    while not isinstance(step := next_step(n, done), IsolateVerdict):
        done.append(StageResult(step, tuple(fault.run(g) for g in step.groups)))
    return len(done), step


def positions(n: int) -> list[int]:
    return sorted({round(i * (n - 1) / 15) for i in range(16)}) if n > 16 else list(range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="4,8,16,32,64,128,256,512,1024")
    args = parser.parse_args()
    expected = {"network": NODE, "slow": NODE, "link": LINK, "healthy": HEALTHY}
    print(f"{'N':>5} {'baseline':>8}  {'network':>8} {'slow':>8} {'link':>8} {'healthy':>8}  ratio (worst/baseline)")
    for n in (int(x) for x in args.nodes.split(",")):
        worst: dict[str, int] = {}
        wrong: list[str] = []
        for kind in expected:
            cases = [Fault(kind, ())] if kind == "healthy" else []
            cases += [Fault(kind, (p,)) for p in positions(n) if kind in ("network", "slow")]
            cases += [Fault(kind, (p, (p + n // 2 + 1) % n)) for p in positions(n) if kind == "link" and n > 2]
            for fault in cases:
                count, verdict = stages(n, fault)
                worst[kind] = max(worst.get(kind, 0), count)
                named = tuple(sorted(fault.at))
                if verdict.kind != expected[kind] or (kind != "healthy" and verdict.nodes != named):
                    wrong.append(f"{kind}@{named}: {verdict.kind} {verdict.nodes}")
        baseline = n - 1
        ratio = max(worst.values()) / baseline
        print(
            f"{n:>5} {baseline:>8}  {worst['network']:>8} {worst['slow']:>8} {worst.get('link', 0):>8} "
            f"{worst['healthy']:>8}  {ratio:.3f}" + (f"  WRONG: {'; '.join(wrong[:3])}" if wrong else "")
        )


if __name__ == "__main__":
    main()
