"""``watch --once`` ends its look early on a warning only once the ranks' own answer cannot still come: a rank that
exited (a warning) while the others have only begun to stand in a collective is named "dead" a moment later, and a
node's lost launcher (a warning at once) must not end the look before the straggler the others wait for is named.
Fed hand-built looks in order, as the live sources hand them on."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.commands.watch import _once as once_local
from ncclcheck.commands.watch import nodes as nodes_command
from ncclcheck.commands.watch.nodes import _once as once_nodes
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.watch import Verdict, WatchState


class Looks:
    """A live source that hands on the given looks in order (the last one again once they run out)."""

    def __init__(self, looks: list[WatchState]) -> None:
        self.looks, self.polled, self.window_ended = looks, 0, False

    def poll(self, final: bool = False) -> WatchState:
        self.polled += 1
        self.window_ended = self.window_ended or final  # the last look of a window that ran out
        return self.looks[min(self.polled, len(self.looks)) - 1]

    def judged(self, final: bool = False, window_s: float | None = None) -> Judging:
        return Judging(4.0, final, window_s)

    def with_flight(self, state: WatchState) -> WatchState:
        return state

    def ended(self) -> bool:
        return False

    def with_map(self) -> bool:
        return False


def args(interval: float = 0.01) -> argparse.Namespace:
    return argparse.Namespace(settle=None, stall=4.0, interval=interval)


def ids(state: WatchState) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.id, f.culprits) for f in state.findings]


def test_a_rank_that_exited_while_the_others_only_began_to_wait_is_named_dead_not_left_at_exited() -> None:
    rounds = [all_in(4, "all_reduce", r1=sample(1, (), status="gone", exit_code=1))] * 4
    exited, dead = (states(job(4), *rounds[:n], every=0.5, stall=4.0) for n in (2, 4))
    assert ids(exited) == [("exited", (1,))] and exited.verdict.status == "warning"
    found = once_local(Looks([exited, exited, dead]), args())  # type: ignore[arg-type]
    assert ids(found) == [("dead", (1,))] and found.verdict.status == "problem"


def test_must_not_a_rank_that_exited_while_the_others_run_their_own_code_is_said_at_once() -> None:
    rounds = [{0: sample(0, stack(None, 80 + i)), 1: sample(1, (), status="zombie", exit_code=1)} for i in range(3)]
    exited = states(job(2), *rounds, every=0.5, stall=4.0)
    source = Looks([exited])
    found = once_local(source, args())  # type: ignore[arg-type]
    assert ids(found) == [("exited", (1,))] and source.polled == 1


def lost_launcher(state: WatchState) -> WatchState:
    """The look as the viewer merges it when node1's launcher has exited: its warning first, then the ranks'."""
    gone = Finding(watch_ids.LAUNCHER_GONE, "warning", "node1: the job's launcher has exited", ranks=(2, 3))
    findings = (*state.findings, gone)
    verdict = state.verdict if state.verdict.status == "problem" else Verdict("warning", gone.message)
    return dataclasses.replace(state, findings=findings, verdict=verdict)


class Clock:
    """The viewer's clock, on by a quarter of a second at each reading (the agents' lines come late on a loaded
    machine: the viewer has watched past --stall while the looks it holds show the others waiting less)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 0.25
        return self.now

    def sleep(self, seconds: float) -> None:
        pass


def test_a_node_s_lost_launcher_does_not_end_the_look_before_the_straggler_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds = [all_in(4, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 6
    early, late = (lost_launcher(states(job(4), *rounds[:n], every=1.0, stall=4.0)) for n in (3, 6))
    assert ids(early) == [("launcher-gone", ())]  # the others have waited 2 s of --stall's 4
    monkeypatch.setattr(nodes_command, "time", Clock())
    source = Looks([early] * 7 + [late])
    found = once_nodes(source, args(interval=1.0))  # type: ignore[arg-type]
    assert ("straggler", (1,)) in ids(found) and source.polled == 8 and not source.window_ended


def test_must_not_a_node_s_lost_launcher_waits_for_nothing_once_no_rank_stands_short_of_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every rank in its own code (a job that runs on): the launcher's warning is the answer, once --stall passed."""
    rounds = [{r: sample(r, stack(None, 80 + i)) for r in range(4)} for i in range(3)]
    running = lost_launcher(states(job(4), *rounds, every=1.0, stall=4.0))
    monkeypatch.setattr(nodes_command, "time", Clock())
    source = Looks([running])
    found = once_nodes(source, args(interval=1.0))  # type: ignore[arg-type]
    assert ids(found) == [("launcher-gone", ())] and not source.window_ended


def test_must_not_a_slow_rank_judged_over_its_own_window_waits_for_the_ranks_moving_through_collectives() -> None:
    """A fail-slow warning is judged over the rounds' window: the ranks pass through their collectives all the
    while (each one short of --stall), and the look ends on it at once, locally as across nodes."""
    moving = states(job(2), *[all_in(2, "all_reduce")] * 2, every=0.5, stall=4.0)
    slow = Finding(watch_ids.SLOW_RANK, "warning", "rank 1 is slow", ranks=(0, 1), culprits=(1,))
    look = dataclasses.replace(moving, findings=(slow,), verdict=Verdict("warning", slow.message))
    source = Looks([look])
    assert ids(once_local(source, args())) == [("slow-rank", (1,))] and source.polled == 1  # type: ignore[arg-type]


def dead_and_busy(looks: int) -> WatchState:
    """Three ranks: rank 0 in all_reduce, rank 1 in its own code (load_batch), rank 2 stopped (SIGSTOP); ``looks``
    looks half a second apart."""
    odd = {"r1": sample(1, stack(None, 40, "load_batch")), "r2": sample(2, (), status="stopped")}
    return states(job(3), *[all_in(3, "all_reduce", **odd)] * looks, every=0.5, stall=4.0)


def test_a_dead_rank_does_not_end_the_look_before_a_rank_outside_any_collective_is_judged() -> None:
    """The stopped rank is an error at once, but rank 0 waits for rank 1 too: the look goes on until --stall says
    whether rank 1 is a straggler as well, not only the stopped rank."""
    early, late = dead_and_busy(4), dead_and_busy(10)
    assert ids(early) == [("dead", (2,))] and early.verdict.status == "problem"
    assert ("straggler", (1,)) in ids(late) and ("dead", (2,)) in ids(late)
    source = Looks([early, early, early, late])
    found = once_local(source, args())  # type: ignore[arg-type]
    assert ids(found) == ids(late) and source.polled == 4


def test_a_dead_rank_does_not_end_the_viewer_s_look_before_a_rank_outside_any_collective_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    early, late = dead_and_busy(4), dead_and_busy(10)
    monkeypatch.setattr(nodes_command, "time", Clock())
    source = Looks([early] * 3 + [late])
    found = once_nodes(source, args(interval=1.0))  # type: ignore[arg-type]
    assert ("straggler", (1,)) in ids(found) and source.polled == 4 and not source.window_ended


def test_must_not_a_dead_rank_the_others_all_wait_on_is_said_at_once() -> None:
    """Nobody outside a collective: nothing more can be judged by waiting, the dead rank is the answer at once."""
    stopped = states(job(3), *[all_in(3, "all_reduce", r2=sample(2, (), status="stopped"))] * 4, every=0.5, stall=4.0)
    assert ids(stopped) == [("dead", (2,))]
    source = Looks([stopped])
    assert ids(once_local(source, args())) == [("dead", (2,))] and source.polled == 1  # type: ignore[arg-type]


def test_must_not_a_dead_rank_with_a_straggler_already_named_waits_on() -> None:
    late = dead_and_busy(10)
    source = Looks([late])
    assert ids(once_local(source, args())) == ids(late) and source.polled == 1  # type: ignore[arg-type]


def test_must_not_a_rank_that_exited_waits_for_a_rank_outside_any_collective() -> None:
    """A crashed rank is the answer at once: torchrun ends the others a moment later, and a look that waited on
    would see only the job's end ("finished") instead of the crash the others waited on."""
    odd = {"r1": sample(1, stack(None, 40, "load_batch")), "r2": sample(2, (), status="gone", exit_code=1)}
    crashed = states(job(3), *[all_in(3, "all_reduce", **odd)] * 4, every=0.5, stall=4.0)
    assert ids(crashed) == [("dead", (2,))] and crashed.verdict.status == "problem"
    source = Looks([crashed])
    assert ids(once_local(source, args())) == [("dead", (2,))] and source.polled == 1  # type: ignore[arg-type]
