"""``smoke --isolate``'s progress lines, verdict and ``ncclcheck.smoke.isolate/1`` JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ncclcheck.model.isolate import HEALTHY, IsolateVerdict, Judged, StageResult

SCHEMA = "ncclcheck.smoke.isolate/1"


def group_text(nodes: tuple[int, ...]) -> str:
    return "+".join(map(str, nodes))


def stage_line(index: int, result: StageResult, judged: tuple[Judged, ...]) -> str:
    """``stage 2 pairs: 0+1 ✓ 1.20 GB/s · 2+3 ✗ all_reduce 0.01 GB/s < floor 0.30``."""
    parts = []
    for one in judged:
        run = one.run
        if not run.completed:
            parts.append(f"{group_text(run.nodes)} ✗ {run.reason or 'failed'}")
        elif one.slow_ops:
            slow = ", ".join(f"{op} {bw:.3g} GB/s < floor {floor:.3g}" for op, bw, floor in one.slow_ops)
            parts.append(f"{group_text(run.nodes)} ✗ slow: {slow}")
        else:
            busbw = min((bw for _, bw in run.busbw_gbps), default=None)
            parts.append(f"{group_text(run.nodes)} ✓" + (f" {busbw:.3g} GB/s" if busbw is not None else ""))
    return f"stage {index} {result.stage.kind}: " + " · ".join(parts)


def verdict_line(verdict: IsolateVerdict, hosts: dict[int, str], stages: int) -> str:
    named = ", ".join(f"node {n} ({hosts.get(n, '?')})" for n in verdict.nodes)
    head = "✓ healthy" if verdict.kind == HEALTHY else f"✗ {verdict.kind.replace('_', ' ')}: {named}"
    return f"ncclcheck smoke --isolate: {head} after {stages} stage(s); {verdict.message}"


def render_verdict(verdict: IsolateVerdict, hosts: dict[int, str], stages: int, console: Console) -> None:
    style = "green" if verdict.kind == HEALTHY else "bold red"
    console.print(verdict_line(verdict, hosts, stages), style=style, highlight=False)


def to_json(
    hosts: dict[int, str],
    done: list[StageResult],
    judged: tuple[tuple[Judged, ...], ...],
    verdict: IsolateVerdict | None,
    state: str,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "state": state,
        "nodes": [{"node": n, "host": h} for n, h in sorted(hosts.items())],
        "runs": len(done),
        "stages": [
            {"index": i, "kind": result.stage.kind, "groups": [_group_json(j) for j in stage_judged]}
            for i, (result, stage_judged) in enumerate(zip(done, judged))
        ],
        "verdict": None if verdict is None else {**verdict.to_json(), "hosts": [hosts.get(n) for n in verdict.nodes]},
    }


def _group_json(one: Judged) -> dict[str, Any]:
    return {
        "nodes": list(one.run.nodes),
        "completed": one.run.completed,
        "passed": one.passed,
        "busbw_gbps": dict(one.run.busbw_gbps),
        "slow": [{"op": op, "busbw_gbps": bw, "floor_gbps": floor} for op, bw, floor in one.slow_ops],
        "reason": one.run.reason,
    }
