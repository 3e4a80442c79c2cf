"""The exact answer, when ranks have a control plane: their live Flight Recorders, compared group by group (the same
analysis ``ncclcheck logs`` makes of dumps). Pure: ``watch`` and ``run`` hand it what the ranks answered."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ncclcheck.analysis.flight.match import analyse
from ncclcheck.analysis.watch.verdict import problem
from ncclcheck.model.findings import Finding, by_severity
from ncclcheck.model.flight import FrDump, Unreadable
from ncclcheck.model.ids import flight as flight_ids
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.watch import WatchState

# What the stacks say when ranks stand still with a rank they may wait on out of sight or unnamed: where the Flight
# Recorders are asked (an error, or this node's ranks waiting on ranks elsewhere)
ASK_ON = frozenset({watch_ids.WAITING_REMOTE})

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
                watch_ids.CONTROL_SILENT,
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
        out += [f for f in report.findings if f.id != flight_ids.FR_DUMPS_MISSING or not silent]
    return by_severity(tuple(out))


def culprits(findings: Sequence[Finding]) -> tuple[int, ...]:
    """The ranks the first error of the Flight Recorders names exactly (() when none singles a rank out)."""
    first = next((f for f in findings if f.severity == "error" and f.id.startswith(flight_ids.PREFIX)), None)
    return first.culprits if first is not None else ()


UNDECIDED = "undecided"  # the verdict's status where ranks stood still past --stall and the stacks cannot tell why


def asked_for(state: WatchState, limit: float) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The stall the Flight Recorders would be asked about (() when no rank stands still in a way they can explain):
    its errors and waits, by kind and culprits; a new one asks again. Ranks that stood still past --stall (``limit``)
    where the stacks cannot tell a long computation from a wait on the GPU (NCCL's host thread spins in a CUDA
    synchronisation: ``.item()``, ``synchronize``) are asked about too, once every rank that stands still has done so
    for ``limit``: the recorders say which collective each rank issued, and whether its GPU started it. Before, a rank
    the recorders call "not joined" may only be late (a slow step): that is not yet a hang."""
    said = tuple(
        (f.id, f.culprits)
        for f in state.findings
        if (f.severity == "error" or f.id in ASK_ON) and f.id != watch_ids.CONTROL_SILENT
    )
    if said or state.verdict.status != UNDECIDED:
        return said
    still = [v for v in state.ranks if v.still_s > 0]
    if any(v.still_s < limit for v in still):  # seen: the zoo's dl-stopped, rank 0 waiting 2.8 s of a 4-s --stall
        return ()
    if not any(v.idle_s < v.still_s for v in still):  # no main thread spins: the stacks will say more (a wait they
        return ()  # follow to its end: a stopped DataLoader worker), the recorders only that a rank did not join
    return ((UNDECIDED, tuple(sorted(v.rank for v in still))),)


# Stack findings that follow the ranks a Flight Recorder calls "not joined" to what they wait on instead (their
# point-to-point ops from run's record, their start-up or group creation): the recorder sees only the collective
# the others entered, so where one of these names culprits among its ranks, it stands first.
FOLLOWED = frozenset(
    {watch_ids.P2P_DEADLOCK, watch_ids.P2P_WRONG_PEER, watch_ids.P2P_TAG_MISMATCH, watch_ids.P2P_UNMATCHED}
)
FOLLOWED |= {watch_ids.STARTUP, watch_ids.GROUP_CREATION, watch_ids.GROUP_ORDER}


def overrides(stacks: Sequence[Finding], found: Sequence[Finding]) -> bool:
    """Whether the Flight Recorders' culprits go before the stacks' first error: they name other culprits, and the
    stacks did not follow those ranks further (a finding of ``FOLLOWED`` that names culprits among them)."""
    first = next((f for f in stacks if f.severity == "error"), None)
    blamed = culprits(found)
    if not blamed or (first is not None and blamed == first.culprits):
        return False
    return not (first is not None and first.id in FOLLOWED and first.culprits and set(blamed) <= set(first.ranks))


def with_exact(state: WatchState, found: Sequence[Finding]) -> WatchState:
    """The state with the Flight Recorders' findings first, and the top line theirs, where they name other culprits
    than the stacks' first error (``overrides``); else the stacks' findings first, the recorders' after them."""
    if not culprits(found):
        return state
    if not overrides(state.findings, found):
        first = next((f.culprits for f in state.findings if f.severity == "error"), ())
        if culprits(found) == first:
            return state
        said = tuple(dataclasses.replace(f, culprits=()) for f in found if f.severity != "info")  # facts, not blame
        return dataclasses.replace(state, findings=state.findings + said)
    findings = tuple(found) + state.findings
    return dataclasses.replace(state, findings=findings, verdict=problem(findings) or state.verdict)


def with_outside(state: WatchState, found: Sequence[Finding]) -> WatchState:
    """The state with findings from outside the stacks: NCCL RAS's exact launch counts (``analysis/ras``), the GPUs'
    readings (``analysis/gpu``). Where the stacks' first error names nobody (every rank at a CUDA synchronisation: a
    hang inside NCCL) or names the same ranks, these go first and the top line is theirs; where they name other
    ranks, they are added as facts, their blame left to the reader."""
    if not found:
        return state
    first = next((f for f in state.findings if f.severity == "error"), None)
    named = next((f.culprits for f in found if f.severity == "error" and f.culprits), ())
    if first is not None and first.culprits and named and set(named) != set(first.culprits):
        said = tuple(dataclasses.replace(f, culprits=()) for f in found)
        return dataclasses.replace(state, findings=state.findings + said)
    findings = by_severity(tuple(found) + state.findings)
    return dataclasses.replace(state, findings=findings, verdict=problem(findings) or state.verdict)
