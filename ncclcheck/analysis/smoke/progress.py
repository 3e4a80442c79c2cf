"""Pure analysis of a smoke run: is it stuck, which op hangs, which ranks are to blame."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ncclcheck.analysis.rank_exits import hint, how, killed
from ncclcheck.analysis.smoke.plan import bus_factor
from ncclcheck.analysis.stacks import call_site, collective, render
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.smoke import (
    Hang,
    HangSample,
    OpResult,
    RankProgress,
    RankState,
    StandingStill,
    Timing,
    size_text,
)
from ncclcheck.model.watch import Verdict

INIT_GRACE_S = 30.0
BAD_PROCESS = {"gone": "dead", "zombie": "dead", "stopped": "stopped"}
# Shown as standing still after this long without a step or a finished iteration: an iteration of a small op takes
# milliseconds, so a second without one is worth saying (a rank a drill holds stands still from its first moment).
STILL_S = 1.0
# What the watch view of ``smoke --tui`` says that is more than "moving" or "not judged yet": kept over smoke's line.
SAYS_MORE = frozenset({"problem", "warning", "undecided", "finished"})


def deadline(rank: RankProgress, timeout_s: float) -> float:
    """How long the watchdog lets ``rank`` stand still: ``--timeout``, and the init grace more while in init."""
    return timeout_s + (INIT_GRACE_S if rank.last_op == "init" else 0.0)


def last_progress(rank: RankProgress, beats: Mapping[int, float]) -> float:
    """The time of the rank's last step or finished iteration (its heartbeat)."""
    return max(rank.last_time, beats.get(rank.rank, 0.0))


def stalled_ranks(
    ranks: Sequence[RankProgress], beats: Mapping[int, float], now: float, timeout_s: float
) -> tuple[int, ...]:
    """Ranks not finished whose last step or iteration (heartbeat) is older than their deadline."""
    late = [r.rank for r in ranks if not r.ended and now - last_progress(r, beats) > deadline(r, timeout_s)]
    return tuple(late)


def standing_still(
    ranks: Sequence[RankProgress], beats: Mapping[int, float], now: float, timeout_s: float
) -> tuple[StandingStill, ...]:
    """Unfinished ranks without progress for ``STILL_S`` or more (a drill's from the start), grouped by place."""
    places: dict[str, list[tuple[int, float, float]]] = {}
    for r in ranks:
        still = max(0.0, now - last_progress(r, beats))
        if not r.ended and (still >= STILL_S or r.last_event == "drill"):
            places.setdefault(_place(r), []).append((r.rank, still, deadline(r, timeout_s)))
    found = [
        StandingStill(tuple(r for r, _, _ in group), place, max(s for _, s, _ in group), max(d for _, _, d in group))
        for place, group in places.items()
    ]
    return tuple(sorted(found, key=lambda s: s.ranks))


def _place(rank: RankProgress) -> str:
    op = rank.last_op
    if op is None:
        return "before its first step"
    if rank.last_event == "drill":
        return f"held by a drill before {op}"
    size = "" if op in ("init", "barrier") else f" {size_text(rank.last_bytes)}"
    called = f" (calling {rank.last_call})" if rank.last_call and rank.last_call != op else ""
    return f"{'in' if rank.last_event == 'start' else 'after'} {op}{size}{called}"


def smoke_verdict(verdict: Verdict, still: Sequence[StandingStill]) -> Verdict:
    """``smoke --tui``'s top line: a rank that smoke's own progress files show standing still is never "moving".

    The watch view judges from stacks and sockets with its own clock; smoke knows better whether a rank took a
    step. Until smoke's watchdog calls the hang (at ``--timeout``), the line counts the standing still up to it.
    """
    if not still or verdict.status in SAYS_MORE:
        return verdict
    said = "; ".join(s.text() for s in still)
    return Verdict("pending", f"… smoke: {said} (its watchdog calls a hang at the deadline)")


def first_failure(ranks: Sequence[RankProgress], failures: Sequence[ChildFailure]) -> int | None:
    """The rank whose failure the others echo (``failures``: torchrun's error summary).

    A rank killed by a crash signal without a Python error of its own comes first (see
    ``deaths``). Then the rank whose Python error came first: each rank records its error's
    time. Then torchrun's root cause, and last the first rank that did not finish.
    """
    errors = {r.rank: r.error_time for r in ranks if r.error_time is not None}
    crashed = killed([f for f in failures if f.rank not in errors])
    if crashed:
        return crashed.rank
    if errors:
        return min(errors, key=lambda rank: (errors[rank], rank))
    root = next((f.rank for f in failures if f.root_cause), None)
    if root is not None:
        return root
    return next((r.rank for r in ranks if not r.ended), None)


def rank_died(
    rank: int | None, death: ChildFailure | None, where: RankProgress | None, output: str, stderr: str | None
) -> Finding:
    """The finding for the rank the others echo: how it died, in which op, its error or last output."""
    manner = how(death) if death else None
    at = ""
    if where and where.last_op:
        at = f" {'during' if where.last_event in ('start', 'drill') else 'after'} {where.last_op}"
    said = f": {where.error}" if where and where.error else f"; last output: {output}" if output else ""
    meaning = hint(death.signal if death else None)
    fix = (f"{meaning}; " if meaning else "") + (
        f"read that rank's stderr{f' ({stderr})' if stderr else ' in the log dir'};"
        " the other ranks' errors are echoes of this one"
    )
    died = f"rank {rank} died" + (f" ({manner})" if manner else "")
    blamed = (rank,) if rank is not None else ()
    return Finding(smoke_ids.RANK_DIED, "error", f"{died}{at}{said}", fix, blamed, culprits=blamed)


def job_results(ranks: Sequence[RankProgress]) -> tuple[OpResult, ...]:
    """Rank 0 records the job-wide result of every finished (op, size)."""
    zero = next((r for r in ranks if r.rank == 0), None)
    return zero.results if zero else ()


def local_results(ranks: Sequence[RankProgress], world_size: int) -> tuple[OpResult, ...]:
    """This node's ranks' own view of every (op, size) they all finished: per-iteration max, wrong summed."""
    steps: dict[tuple[str, int], list[Timing]] = {}
    for r in ranks:
        for t in r.timings:
            steps.setdefault((t.op, t.bytes), []).append(t)
    results = []
    for (op, size), timings in steps.items():
        if len(timings) < len(ranks):
            continue
        per_iter = [max(values) for values in zip(*(t.times_us for t in timings))]
        wrong = sum(t.wrong for t in timings)
        results.append(op_result(op, size, timings[0].count, per_iter, wrong, world_size))
    return tuple(results)


def op_result(op: str, size: int, count: int, per_iter: Sequence[float], wrong: int, world_size: int) -> OpResult:
    """p50/p95 of the per-iteration times and nccl-tests' algbw/busbw at the median."""
    if not per_iter:
        return OpResult(op, size, count, "ok" if not wrong else "wrong", None, None, None, None, wrong)
    ordered = sorted(per_iter)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    algbw = size / p50 / 1e3 if p50 > 0 else 0.0
    status = "ok" if not wrong else "wrong"
    busbw = algbw * bus_factor(op, world_size)
    return OpResult(op, size, count, status, p50, p95, algbw, busbw, wrong, ordered[0])


def _hung_step(ranks: Sequence[RankProgress]) -> tuple[str, int]:
    starts = Counter((r.last_op, r.last_bytes) for r in ranks if r.last_event == "start" and r.last_op)
    if starts:
        (op, size), _ = starts.most_common(1)[0]
        return str(op), size
    other = next((r for r in ranks if r.last_op), None)
    return (str(other.last_op), other.last_bytes) if other else ("init", 0)


def rank_state(progress: RankProgress, sample: HangSample | None, op: str) -> RankState:
    frames = sample.stack if sample else ()
    process = sample.process if sample else "unknown"
    in_op = progress.last_event == "start" and progress.last_op == op
    called = (progress.last_call or progress.last_op) if progress.last_event == "start" else None
    state = BAD_PROCESS.get(process) or (
        "in_collective" if in_op and called == op else "wrong_collective" if in_op else "not_in_collective"
    )
    stack = (
        render(frames) if frames else ((f"(no stack: {sample.stack_error})",) if sample and sample.stack_error else ())
    )
    return RankState(progress.rank, state, collective(frames) or called, call_site(frames), stack)


def diagnose(ranks: Sequence[RankProgress], samples: Mapping[int, HangSample], world_size: int) -> Hang:
    """Which op hangs and who is to blame: ranks not in it, in another one, stopped, or dead."""
    op, size = _hung_step(ranks)
    states = tuple(rank_state(r, samples.get(r.rank), op) for r in ranks)
    missing = sorted(set(range(world_size)) - {r.rank for r in ranks})
    culprits = tuple(sorted([s.rank for s in states if s.state != "in_collective"]))
    return Hang(op, size, culprits, states, _message(op, states, culprits, missing))


def merge(local: Hang, remote: Sequence[Hang], world_size: int) -> Hang:
    """Node 0's diagnosis joined with the other nodes' (posted to the rendezvous store)."""
    states = {s.rank: s for s in local.ranks}
    for hang in remote:
        for s in hang.ranks:
            if s.state == "in_collective" and hang.op != local.op:  # waiting, but in another step than ours
                s = replace(s, state="wrong_collective", collective=hang.op)
            states.setdefault(s.rank, s)
    ordered = tuple(states[r] for r in sorted(states))
    # each node judged its ranks against the step its own progress files name: a rank inside that step waits,
    # whatever function its stack is in (init_process_group, all_gather_object, a torch-internal name)
    culprits = tuple(s.rank for s in ordered if s.state != "in_collective")
    missing = sorted(set(range(world_size)) - set(states))
    return Hang(local.op, local.bytes, culprits, ordered, _message(local.op, ordered, culprits, missing))


def _message(op: str, states: Sequence[RankState], culprits: Sequence[int], missing: Sequence[int]) -> str:
    waiting = [s.rank for s in states if s.state == "in_collective"]
    parts = []
    for s in states:
        if s.rank not in culprits:
            continue
        where = f" at {s.call_site}" if s.call_site else ""
        doing = {
            "dead": "has exited",
            "stopped": "is stopped (SIGSTOP?)",
            "wrong_collective": f"called {s.collective} instead{where}",
            "not_in_collective": f"is not in {op}" + (f": it is in {s.collective or 'user code'}{where}"),
        }
        parts.append(f"rank {s.rank} {doing.get(s.state, s.state)}")
    if waiting:
        parts.append(f"rank(s) {_ranks(waiting)} wait in {op}")
    if missing:
        parts.append(f"rank(s) {_ranks(missing)} live on other nodes (see their node's report)")
    if not culprits:
        parts.insert(
            0,
            f"every rank is inside {op} and none progresses: a transport-level hang;"
            " run `ncclcheck env` on each node and `ncclcheck logs` on the NCCL logs",
        )
    return "; ".join(parts)


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))
