"""Ranks that stood still past --stall where the stacks cannot tell a long computation from a wait on the GPU (NCCL's
host thread spins in a CUDA synchronisation): the live Flight Recorders are asked, and what they say decides.

Seen on an H100 (tests/fixtures/gpu_check/sleep): rank 1 queued a minute-long kernel before its all_reduce; both
ranks' main threads spun at ``.item()``, ``watch --once`` said "? cannot tell" and ``ncclcheck run`` saw no hang in
45 s. The recorders of the same job with start events (timing/sleep) say rank 1's GPU never started #4."""

from __future__ import annotations

import dataclasses

from conftest import FIXTURES
from watch_states import job, sample, stack, states

from ncclcheck.analysis.watch.flight import asked_for, exact, with_exact
from ncclcheck.collectors.flight import load
from ncclcheck.model.flight import FrDump
from ncclcheck.model.watch import Verdict, WatchState

SLEEP = FIXTURES / "gpu_check" / "timing" / "sleep" / "run" / "fr"


def recorders() -> list[FrDump]:
    dumps = [load(str(SLEEP / f"rank_{r}")) for r in range(2)]
    assert all(isinstance(d, FrDump) for d in dumps)
    return [d for d in dumps if isinstance(d, FrDump)]


def spinning() -> WatchState:
    """Both ranks at ``.item()`` (not a collective), their main threads busy, for longer than --stall."""
    looks = [{r: sample(r, stack(None, 77, "main"), cpu=5.0 * i) for r in range(2)} for i in range(5)]
    return states(job(2), *looks, every=5.0, stall=10.0)


def test_the_stacks_cannot_tell_and_the_recorders_are_asked() -> None:
    state = spinning()
    assert state.verdict.status == "undecided" and state.findings == (), state.verdict
    assert asked_for(state, 10.0) == (("undecided", (0, 1)),)


def test_the_recorders_name_the_rank_whose_gpu_never_started_the_collective() -> None:
    decided = with_exact(spinning(), exact(recorders()))
    assert decided.verdict.status == "problem", decided.verdict
    first = decided.findings[0]
    assert (first.id, first.culprits) == ("fr-not-started", (1,)), first


def test_must_not_a_moving_job_or_recorders_that_name_nobody_ask_or_decide() -> None:
    moving = states(job(2), *[{r: sample(r, stack(None, 80 + i)) for r in range(2)} for i in range(5)])
    assert moving.verdict.status in ("ok", "pending") and asked_for(moving, 10.0) == ()
    healthy = [dataclasses.replace(d, entries=d.entries[:-1]) for d in recorders()]  # up to #3, all completed
    state = spinning()
    assert exact(healthy) == () and with_exact(state, exact(healthy)) == state
    said = WatchState(1.0, job(2), (), (), Verdict("pending", "… watching"))
    assert asked_for(said, 10.0) == ()


def test_must_not_ranks_whose_main_threads_do_not_spin_ask_the_recorders() -> None:
    """A rank that waits idle (a queue, a stopped DataLoader worker) is followed to its end by the stacks; the
    recorders would only say that it did not join (seen: the zoo's dl-stopped case, fr-not-joined before the chain)."""
    looks = [{0: sample(0, stack(None, 77, "main")), 1: sample(1, stack(None, 80 + i), cpu=5.0 * i)} for i in range(5)]
    state = states(job(2), *looks, every=5.0, stall=10.0)
    if state.verdict.status == "undecided":
        assert asked_for(state, 10.0) == (), state.verdict
    forced = dataclasses.replace(
        spinning(), ranks=tuple(dataclasses.replace(v, idle_s=v.still_s) for v in spinning().ranks)
    )
    assert asked_for(forced, 10.0) == ()


def test_must_not_the_recorders_be_asked_before_every_rank_standing_still_did_so_past_stall() -> None:
    """Seen under load (the zoo's dl-stopped, --stall 4): rank 1 stood still 4.1 s outside any collective, its main
    thread busy a moment of it; rank 0 had waited in all_reduce 2.8 s. The recorders' "rank 1 never issued it" then is
    a late rank, not yet a hang: the stacks' straggler, with its chain, comes once rank 0 waited past --stall."""
    state = spinning()
    early = dataclasses.replace(
        state, ranks=(dataclasses.replace(state.ranks[0], still_s=2.8, idle_s=2.8), *state.ranks[1:])
    )
    assert asked_for(early, 4.0) == () and asked_for(state, 4.0) == (("undecided", (0, 1)),)
