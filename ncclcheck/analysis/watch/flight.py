"""The exact answer, when ranks have a control plane: their live Flight Recorders, compared group by group (the same
analysis ``ncclcheck logs`` makes of dumps). Pure: ``watch`` and ``run`` hand it what the ranks answered."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ncclcheck.analysis.logs.flight import analyse
from ncclcheck.analysis.watch.verdict import problem
from ncclcheck.model.findings import Finding, by_severity
from ncclcheck.model.flight import FrDump, Unreadable
from ncclcheck.model.ranks import span
from ncclcheck.model.watch import WatchState

# What the stacks say when ranks stand still with a rank they may wait on out of sight or unnamed: where the Flight
# Recorders are asked (an error, or this node's ranks waiting on ranks elsewhere)
ASK_ON = frozenset({"waiting-remote"})

SILENT_FIX = (
    "a rank whose control plane does not answer holds the GIL in native code or is stopped (SIGSTOP, D state): "
    "look at its native stack (py-spy dump --native --pid) or its log"
)


def exact(
    dumps: Sequence[FrDump], unreadable: Sequence[Unreadable] = (), silent: Mapping[int, str] | None = None
) -> tuple[Finding, ...]:
    """Findings from live Flight Recorders; ``silent``: the ranks asked that did not answer, and how they failed.
    A rank that did not answer is named as such, never as a crash, and the others are judged without it."""
    out: list[Finding] = []
    if silent:
        ranks = tuple(sorted(silent))
        out.append(
            Finding(
                "control-silent",
                "warning",
                f"rank {span(list(ranks))}: its control plane did not answer within 1 s "
                f"({'; '.join(f'rank {r}: {why}' for r, why in sorted(silent.items()))}); "
                "the other ranks' Flight Recorders are judged without it",
                SILENT_FIX,
                ranks,
            )
        )
    if dumps or unreadable:
        report = analyse(dumps, unreadable, tuple(silent or ()))
        out += [f for f in report.findings if f.id != "fr-dumps-missing" or not silent]
    return by_severity(tuple(out))


def culprits(findings: Sequence[Finding]) -> tuple[int, ...]:
    """The ranks the first error of the Flight Recorders names exactly (() when none singles a rank out)."""
    first = next((f for f in findings if f.severity == "error" and f.id.startswith("fr-")), None)
    return first.culprits if first is not None else ()


def asked_for(state: WatchState) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The stall the Flight Recorders would be asked about (() when no rank stands still in a way they can explain):
    its errors and waits, by kind and culprits; a new one asks again."""
    return tuple(
        (f.id, f.culprits)
        for f in state.findings
        if (f.severity == "error" or f.id in ASK_ON) and f.id != "control-silent"
    )


def with_exact(state: WatchState, found: Sequence[Finding]) -> WatchState:
    """The state with the Flight Recorders' findings first, and the top line theirs, where they name other culprits
    than the stacks' first error; where they agree (or name nobody), the stacks' findings stand alone."""
    first = next((f.culprits for f in state.findings if f.severity == "error"), ())
    if not culprits(found) or culprits(found) == first:
        return state
    findings = tuple(found) + state.findings
    return dataclasses.replace(state, findings=findings, verdict=problem(findings) or state.verdict)
