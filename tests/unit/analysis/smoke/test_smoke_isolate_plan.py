"""``smoke --isolate``'s plan (analysis/smoke/isolate.py) against simulated clusters of 2..64 nodes.

A simulated cluster answers each group's run from its planted faults: a node that fails alone, a node whose
network fails (as a wrong GLOO_SOCKET_IFNAME or a dead NIC does: alone it passes), a rate-limited node (its
groups complete, slowly), a dropped or slow link between two nodes.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ncclcheck.analysis.smoke.isolate import FLOOR_SHARE, busbw_floors, judge, next_step
from ncclcheck.model.isolate import (
    HEALTHY,
    LINK,
    NODE,
    NOT_SINGLE,
    GroupRun,
    IsolateVerdict,
    Stage,
    StageResult,
    verdict_from_json,
)

FAST, SLOW = 1.0, 0.01  # GB/s: a healthy veth against one under tbf


@dataclass(frozen=True)
class Cluster:
    nodes: int
    dead: frozenset[int] = frozenset()  # fails alone
    network: frozenset[int] = frozenset()  # passes alone, fails with any other node
    slow: frozenset[int] = frozenset()  # completes with others, at SLOW busbw
    links: frozenset[frozenset[int]] = frozenset()  # fails when both ends run together
    slow_links: frozenset[frozenset[int]] = frozenset()

    def run(self, group: tuple[int, ...]) -> GroupRun:
        members = set(group)
        if members & self.dead:
            return GroupRun(group, False, (), "a rank exited 1")
        if len(group) == 1:
            return GroupRun(group, True)
        if members & self.network or any(link <= members for link in self.links):
            return GroupRun(group, False, (), "no rank started")
        slow = members & self.slow or any(link <= members for link in self.slow_links)
        # A little spread between healthy groups, so that no floor is met exactly.
        busbw = SLOW if slow else FAST * (1 + 0.05 * (sum(group) % 3))
        return GroupRun(group, True, (("all_reduce", busbw), ("all_gather", busbw / 2)))


def isolate(cluster: Cluster, floor: float | None = None) -> tuple[IsolateVerdict, list[Stage]]:
    done: list[StageResult] = []
    for _ in range(500):
        step = next_step(cluster.nodes, done, floor)
        if isinstance(step, IsolateVerdict):
            return step, [d.stage for d in done]
        every = [n for group in step.groups for n in group]
        assert len(every) == len(set(every)), f"a node in two groups of one stage: {step}"
        assert all(0 <= n < cluster.nodes for n in every) and step.groups
        done.append(StageResult(step, tuple(cluster.run(g) for g in step.groups)))
    raise AssertionError("the plan never ended")


SIZES = range(2, 65)


def positions(n: int) -> list[int]:
    return list(range(n)) if n <= 12 else sorted({0, 1, n // 2 - 1, n // 2, n - 2, n - 1, n // 3})


def bound(n: int, c: float = 4) -> float:
    """The most stages one bad node may take: c·log2 N with c = 4 (and 3 for N = 2); a link, with c = 5."""
    return max(3.0, c * math.log2(n))


# must fire ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_a_node_that_fails_alone_is_named_after_the_others_pass_without_it(n: int) -> None:
    for bad in positions(n):
        verdict, stages = isolate(Cluster(n, dead=frozenset({bad})))
        assert (verdict.kind, verdict.nodes) == (NODE, (bad,)) and "alone" in verdict.message
        rest = tuple(i for i in range(n) if i != bad)
        assert [s.kind for s in stages] == ["alone"] + (["confirm"] if n > 2 else [])
        assert n == 2 or stages[1].groups == (rest,)


@pytest.mark.parametrize("n", range(3, 65))
def test_a_node_whose_network_fails_is_named_in_log_n_stages(n: int) -> None:
    for bad in positions(n):
        verdict, stages = isolate(Cluster(n, network=frozenset({bad})))
        assert (verdict.kind, verdict.nodes) == (NODE, (bad,)), (n, bad, stages)
        assert len(stages) <= bound(n), (n, bad, len(stages))


@pytest.mark.parametrize("n", range(4, 65))
def test_a_rate_limited_node_is_named_from_the_healthy_majority(n: int) -> None:
    for bad in positions(n):
        verdict, stages = isolate(Cluster(n, slow=frozenset({bad})))
        assert (verdict.kind, verdict.nodes) == (NODE, (bad,)), (n, bad, stages)
        assert len(stages) <= bound(n)


@pytest.mark.parametrize("n", range(3, 65))
def test_one_dropped_link_is_named_as_the_pair(n: int) -> None:
    ends = {(0, 1), (0, n - 1), (n // 2 - 1, n // 2), (1, n - 2), (n // 3, 2 * n // 3)}
    for a, b in sorted((min(e), max(e)) for e in ends if e[0] != e[1]):
        verdict, stages = isolate(Cluster(n, links=frozenset({frozenset({a, b})})))
        assert (verdict.kind, verdict.nodes) == (LINK, (a, b)), (n, a, b, stages)
        assert len(stages) <= bound(n, c=5), (n, a, b, len(stages))
        assert {s.kind for s in stages} >= {"alone", "pairs"}


@pytest.mark.parametrize("n", [3, 4, 8, 13, 64])
def test_a_slow_link_is_named_as_the_pair_against_a_given_floor(n: int) -> None:
    # Across the boundary, the only group that holds both ends is the one of its size: without a floor it is
    # compared with nothing, and the healthy verdict says busbw was judged between groups only.
    a, b = 0, n - 1
    verdict, _ = isolate(Cluster(n, slow_links=frozenset({frozenset({a, b})})), floor=0.5)
    assert (verdict.kind, verdict.nodes) == (LINK, (a, b))
    verdict, _ = isolate(Cluster(n, slow_links=frozenset({frozenset({a, b})})))
    assert verdict.kind == LINK or "compared between groups only" in verdict.message


def test_a_link_across_halves_is_found_by_the_boundary_probe() -> None:
    verdict, stages = isolate(Cluster(8, links=frozenset({frozenset({2, 5})})))
    kinds = [s.kind for s in stages]
    assert verdict.nodes == (2, 5) and kinds[:4] == ["alone", "pairs", "halves", "boundary"]
    assert Stage("boundary", (tuple(range(8)),)) in stages and "cross" in kinds


def test_two_nodes_name_the_pair_and_say_a_node_and_the_link_look_the_same() -> None:
    verdict, stages = isolate(Cluster(2, network=frozenset({1})))
    assert (verdict.kind, verdict.nodes) == (LINK, (0, 1)) and len(stages) == 2
    assert "look the same" in verdict.message


@pytest.mark.parametrize("slow", [0, 1, 2])
def test_three_nodes_never_call_a_slow_one_healthy(slow: int) -> None:
    verdict, _ = isolate(Cluster(3, slow=frozenset({slow})), floor=0.5)
    assert (verdict.kind, verdict.nodes) == (NODE, (slow,))
    verdict, _ = isolate(Cluster(3, slow=frozenset({slow})))  # node 0 is in both pairs the plan runs first
    assert verdict.kind != HEALTHY and slow in verdict.nodes


def test_two_nodes_judge_busbw_only_against_a_given_floor() -> None:
    slow = Cluster(2, slow=frozenset({1}))
    assert isolate(slow)[0].kind == HEALTHY  # one run, nothing to compare it with
    verdict, _ = isolate(slow, floor=0.5)
    assert (verdict.kind, verdict.nodes) == (LINK, (0, 1))


# must not fire ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 65))
def test_a_healthy_cluster_names_nobody(n: int) -> None:
    verdict, stages = isolate(Cluster(n))
    assert verdict.kind == HEALTHY and verdict.nodes == ()
    assert len(stages) <= max(1.0, bound(n))


@pytest.mark.parametrize("n", [4, 5, 9, 16, 33, 64])
def test_two_bad_nodes_are_not_a_single_node(n: int) -> None:
    for faults in (
        Cluster(n, dead=frozenset({0, n - 1})),
        Cluster(n, network=frozenset({0, n - 1})),
        Cluster(n, network=frozenset({1, 2})),
        Cluster(n, dead=frozenset({1}), network=frozenset({n - 1})) if n > 4 else Cluster(n, dead=frozenset({1, 3})),
    ):
        verdict, _ = isolate(faults)
        assert verdict.kind == NOT_SINGLE and "not a single node" in verdict.message, (faults, verdict)


@pytest.mark.parametrize("n", [4, 5, 9, 16, 33, 64])
def test_two_slow_nodes_are_never_named_as_one(n: int) -> None:
    cluster = Cluster(n, slow=frozenset({0, n // 2}))
    verdict, _ = isolate(cluster, floor=0.5)
    assert verdict.kind == NOT_SINGLE
    verdict, _ = isolate(cluster)  # without a floor, a slow half may be the majority: never one node named
    assert verdict.kind != NODE and verdict.kind != LINK
    assert verdict.kind == NOT_SINGLE or "compared between groups only" in verdict.message


@pytest.mark.parametrize("n", [4, 8, 16])
def test_two_nodes_whose_networks_fail_are_never_named_as_one(n: int) -> None:
    verdict, _ = isolate(Cluster(n, network=frozenset({0, n - 1})))
    assert verdict.kind == NOT_SINGLE and set(verdict.nodes) >= {0, n - 1}


def test_a_slow_but_healthy_group_above_the_floor_passes() -> None:
    runs = [GroupRun((0, 1), True, (("all_reduce", 1.0),)), GroupRun((2, 3), True, (("all_reduce", 0.4),))]
    (judged,) = judge([StageResult(Stage("pairs", ((0, 1), (2, 3))), tuple(runs))])
    assert all(j.passed for j in judged)  # 0.4 is over a quarter of the median


def test_floors_come_from_nodes_not_runs() -> None:
    # Node 3 is in three of four runs; the median over nodes is still the healthy one.
    runs = [
        GroupRun((0, 3), True, (("all_reduce", SLOW),)),
        GroupRun((1, 3), True, (("all_reduce", SLOW),)),
        GroupRun((2, 3), True, (("all_reduce", SLOW),)),
        GroupRun((0, 1), True, (("all_reduce", FAST),)),
        GroupRun((0, 1, 2), True, (("all_reduce", FAST / 8),)),
    ]
    assert busbw_floors(runs, None) == pytest.approx(
        {("all_reduce", 2): FLOOR_SHARE * (FAST + SLOW) / 2, ("all_reduce", 3): FAST / 32}  # nodes 2, 3 only slow
    )
    assert busbw_floors(runs, 2.0) == {("all_reduce", 2): 2.0, ("all_reduce", 3): 2.0}


def test_a_larger_group_at_lower_busbw_is_not_slow() -> None:
    # Measured on four healthy test hosts (gloo): all_gather 0.146 GB/s in pairs, 0.0198 with all four.
    pairs = (GroupRun((0, 1), True, (("all_gather", 0.146),)), GroupRun((2, 3), True, (("all_gather", 0.15),)))
    everyone = (GroupRun((0, 1, 2, 3), True, (("all_gather", 0.0198),)),)
    done = [
        StageResult(Stage("pairs", ((0, 1), (2, 3))), pairs),
        StageResult(Stage("boundary", ((0, 1, 2, 3),)), everyone),
    ]
    assert all(j.passed for stage in judge(done) for j in stage)


def test_a_node_alone_is_judged_by_its_smoke_only() -> None:
    alone = StageResult(Stage("alone", ((0,), (1,))), (GroupRun((0,), True), GroupRun((1,), False, (), "exit 1")))
    (judged,) = judge([alone], floor_gbps=100.0)
    assert [j.passed for j in judged] == [True, False]


def test_a_group_with_no_run_failed() -> None:
    done = [StageResult(Stage("alone", ((0,), (1,), (2,))), (GroupRun((0,), True), GroupRun((2,), True)))]
    confirm = next_step(3, done)
    assert confirm == Stage("confirm", ((0, 2),))
    done.append(StageResult(confirm, (GroupRun((0, 2), True, (("all_reduce", 1.0),)),)))
    verdict = next_step(3, done)
    assert isinstance(verdict, IsolateVerdict) and (verdict.kind, verdict.nodes) == (NODE, (1,))


def test_results_that_do_not_follow_the_plan_are_refused() -> None:
    with pytest.raises(ValueError, match="the plan asks"):
        next_step(2, [StageResult(Stage("pairs", ((0, 1),)), (GroupRun((0, 1), True),))])


# One fast pair sets the floor: the busbw the four healthy test hosts measured (send_recv, GB/s), where the plan
# named a "link 2+3" that each of its nodes matched with another node.
MEASURED = {(0, 1): 0.27, (2, 3): 0.024, (0, 2): 0.0418, (1, 3): 0.0461}


def measured(group: tuple[int, ...], slow_link: float | None = None) -> GroupRun:
    busbw = slow_link if slow_link is not None and group == (2, 3) else MEASURED.get(group, 0.05)
    return GroupRun(group, True, (("send_recv", busbw),) if len(group) > 1 else ())


def replay(slow_link: float | None = None, floor: float | None = None) -> tuple[IsolateVerdict, list[Stage]]:
    done: list[StageResult] = []
    while not isinstance(step := next_step(4, done, floor), IsolateVerdict):
        done.append(StageResult(step, tuple(measured(g, slow_link) for g in step.groups)))
    return step, [d.stage for d in done]


def test_a_pair_no_slower_than_its_nodes_with_others_is_not_a_link() -> None:
    verdict, stages = replay()
    assert verdict.kind == HEALTHY and verdict.nodes == (), verdict
    assert "2+3 were under the floor once" in verdict.message
    assert [s.kind for s in stages][:3] == ["alone", "pairs", "swap"]  # the swap that clears it


def test_a_pair_far_slower_than_its_nodes_with_others_is_the_link() -> None:
    verdict, _ = replay(slow_link=0.002)  # under a quarter of 0+2 and 1+3
    assert (verdict.kind, verdict.nodes) == (LINK, (2, 3)), verdict


def test_a_given_floor_judges_the_pair_by_itself() -> None:
    verdict, _ = replay(floor=0.03)  # 2+3 at 0.024 is under the floor the user gave
    assert (verdict.kind, verdict.nodes) == (LINK, (2, 3)), verdict


# The dropped link between nodes 1 and 3 on the four test hosts, as a loaded machine measured it (send_recv, GB/s;
# None: the group never completed): the swap 0+1 came in just under the floor (noise), and the plan named "node 1's
# network" instead of the link.
DROPPED_1_3: dict[tuple[int, ...], float | None] = {
    (0, 1): 0.0324,
    (2, 3): 0.0211,
    (0, 1, 2, 3): None,
    (0, 2): 0.25,
    (1, 3): None,
}
SWAPPED = {(0, 1): 0.0318, (2, 3): 0.0533}


def test_a_swap_only_measured_under_the_floor_does_not_turn_a_dropped_link_into_a_node() -> None:
    done: list[StageResult] = []
    while not isinstance(step := next_step(4, done), IsolateVerdict):
        runs = []
        for g in step.groups:
            busbw = SWAPPED.get(g) if step.kind == "swap" else DROPPED_1_3.get(g, 0.05)
            if len(g) == 1:
                runs.append(GroupRun(g, True))
            elif busbw is None:
                runs.append(GroupRun(g, False, (), "the ranks never started"))
            else:
                runs.append(GroupRun(g, True, (("send_recv", busbw),)))
        done.append(StageResult(step, tuple(runs)))
        assert len(done) < 12, [d.stage for d in done]
    assert (step.kind, step.nodes) == (LINK, (1, 3)), step


# Node 3 under tbf at 8 mbit on the four test hosts, as measured (GB/s at each op's fastest iteration is what the
# plan sees now; these are the medians the runs printed): the swap of node 2 with node 0 came in under a floor
# that node 0's fast pair set, many times faster than the failing pair, and the plan said "not a single node".
OPS = ("all_gather", "all_reduce", "send_recv")
RATE_LIMITED_3 = {  # (CI run, quiet run)
    (0, 1): ((0.0219, 0.0114, 0.249), (0.0737, 0.0373, 0.375)),
    (2, 3): ((0.000953, 0.000954, 0.000955), (0.000954, 0.000952, 0.000955)),
    (0, 2): ((0.09, 0.03, 0.0245), (0.15, 0.08, 0.0653)),
    (1, 3): ((0.000951, 0.00095, 0.000939), (0.000954, 0.000952, 0.000956)),
}


def replayed(answer: Callable[[Stage, tuple[int, ...]], GroupRun]) -> tuple[IsolateVerdict, list[Stage]]:
    """The plan over four nodes, each group of each stage answered by ``answer`` (as measured on the test hosts)."""
    done: list[StageResult] = []
    while not isinstance(step := next_step(4, done), IsolateVerdict):
        done.append(StageResult(step, tuple(answer(step, g) for g in step.groups)))
        assert len(done) < 12, [d.stage for d in done]
    return step, [d.stage for d in done]


def replay_measured(table: dict[tuple[int, ...], tuple[float, ...] | None]) -> tuple[IsolateVerdict, list[Stage]]:
    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        bw = table.get(g, (0.09, 0.03, 0.3))  # the other groups: as 0+1 measured; None: never completed
        if bw is None:
            return GroupRun(g, False, (), "node 2: init hung")
        return GroupRun(g, True, tuple(zip(OPS, bw)) if len(g) > 1 else ())

    return replayed(answer)


@pytest.mark.parametrize("run", [0, 1], ids=["ci", "quiet"])
def test_must_not_a_swap_many_times_faster_than_the_failing_pair_blames_its_node(run: int) -> None:
    table: dict[tuple[int, ...], tuple[float, ...] | None] = {g: bw[run] for g, bw in RATE_LIMITED_3.items()}
    verdict, stages = replay_measured(table)
    assert (verdict.kind, verdict.nodes) == (NODE, (3,)), verdict
    assert [s.kind for s in stages] == ["alone", "pairs", "swap", "confirm"]  # the others ran without node 3


def test_must_fire_a_swap_as_slow_as_the_failing_pair_blames_its_node_too() -> None:
    both: dict[tuple[int, ...], tuple[float, ...] | None] = {g: bw[0] for g, bw in RATE_LIMITED_3.items()}
    both[(0, 2)] = (0.002, 0.003, 0.0031)  # node 2 as slow as the pair: within a quarter of 2+3's busbw
    verdict, _ = replay_measured(both)
    assert verdict.kind == NOT_SINGLE and verdict.nodes == (2, 3), verdict


def test_must_fire_a_swap_that_did_not_reproduce_is_still_caught_by_the_confirm_stage() -> None:
    table: dict[tuple[int, ...], tuple[float, ...] | None] = {g: bw[0] for g, bw in RATE_LIMITED_3.items()}
    table[(0, 1, 2)] = None  # the swap cleared node 2, but the others without node 3 fail: a second fault
    verdict, stages = replay_measured(table)
    assert verdict.kind == NOT_SINGLE and stages[-1].kind == "confirm", verdict


# The dropped link 1<->3 on the test hosts, as measured: pair 0+1 slow by noise in the pairs stage (0.049 GB/s
# against a 0.084 floor; here 0.03 against 0.041), 2+3 fine; the swaps 0+2 fine and 1+3 never started. The plan
# said "node 1's network".
@pytest.mark.parametrize("again", [0.3, 0.03], ids=["fast-again", "slow-again"])
def test_must_not_a_slow_pair_and_a_swap_that_never_starts_blame_the_node_they_share(again: float) -> None:
    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        if len(g) == 1:
            return GroupRun(g, True)
        if {1, 3} <= set(g):
            return GroupRun(g, False, (), "node 1: the ranks never started")
        bw = 0.03 if g == (0, 1) and step.kind == "pairs" else again if g == (0, 1) else 0.3
        return GroupRun(g, True, (("all_gather", bw),))

    verdict, _ = replayed(answer)
    assert (verdict.kind, verdict.nodes) == (LINK, (1, 3)), verdict


def test_must_fire_a_pair_that_fails_outright_and_its_swap_too_names_the_node() -> None:
    verdict, _ = isolate(Cluster(4, network=frozenset({1})))  # both outright: the same fault
    assert (verdict.kind, verdict.nodes) == (NODE, (1,)), verdict


# A healthy set of four test hosts, as CI measured it under load: pair 2+3's all_gather just under the floor (0.0199
# against 0.0209) and several times slower than 0+2 and 1+3 in the swaps. The plan said "link 2+3" from that one
# measurement; a pair that was only slow is run again, and named only when it is slow again.
def replay_again(again: float) -> tuple[IsolateVerdict, list[Stage]]:
    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        bw = 0.0199 if g == (2, 3) and step.kind == "pairs" else again if g == (2, 3) else 0.147
        return GroupRun(g, True, (("all_gather", bw),) if len(g) > 1 else ())

    return replayed(answer)


def test_must_not_a_pair_slow_once_is_a_link() -> None:
    verdict, stages = replay_again(0.15)
    assert verdict.kind == HEALTHY, verdict
    assert "again" in [s.kind for s in stages] and "2+3 were under the floor once" in verdict.message


def test_must_fire_a_pair_slow_again_is_the_link() -> None:
    verdict, stages = replay_again(0.0199)
    assert (verdict.kind, verdict.nodes) == (LINK, (2, 3)), verdict
    assert [s.kind for s in stages][:4] == ["alone", "pairs", "swap", "again"]


def dropped_1_3(measured: Callable[[Stage, tuple[int, ...]], float | None]) -> tuple[IsolateVerdict, list[Stage]]:
    """The plan over the four test hosts with the link 1<->3 dropped: a node alone passes, a group holding both
    ends never starts; ``measured`` answers the others: a busbw (completed: ``WELL``, as healthy groups measured)
    or None (never started)."""

    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        if len(g) == 1:
            return GroupRun(g, True)
        bw = None if {1, 3} <= set(g) else measured(step, g)
        if bw is None:
            return GroupRun(g, False, (), "the ranks never started")
        return GroupRun(g, True, (("all_reduce", bw),))

    return replayed(answer)


WELL = 0.35  # GB/s: a healthy group of the test hosts


# The dropped link 1<->3 on four test hosts, as CI measured it under load: the pairs pass (0+1, 2+3), the boundary
# 0+1+2+3 never starts (connect: Invalid argument); across, 1+3 never starts and 0+2, healthy, runs its all_reduce
# under the floor (0.0722 GB/s against 0.0875). The plan said "not single: fail across in more than one part".
def replay_cross(cross_02: float | None, confirm_ok: bool = True) -> tuple[IsolateVerdict, list[Stage]]:
    def measured(step: Stage, g: tuple[int, ...]) -> float | None:
        if step.kind == "confirm" and not confirm_ok:
            return None
        return cross_02 if g == (0, 2) and step.kind == "cross" else WELL

    return dropped_1_3(measured)


def test_must_not_a_healthy_group_slow_beside_a_dropped_link_make_it_not_single() -> None:
    verdict, stages = replay_cross(0.0722)
    assert (verdict.kind, verdict.nodes) == (LINK, (1, 3)), verdict
    assert [s.kind for s in stages][-2:] == ["confirm", "confirm"]  # each end left out in turn, the rest pass


def test_must_fire_two_groups_across_that_never_complete_are_not_single_and_a_slow_one_is_caught_by_confirm() -> None:
    verdict, _ = replay_cross(None)  # 0+2 never completes either: two faults across
    assert verdict.kind == NOT_SINGLE and "more than one part" in verdict.message, verdict
    verdict, stages = replay_cross(0.0722, confirm_ok=False)  # 0+2 really bad: the rest fail without node 1 too
    assert verdict.kind == NOT_SINGLE and stages[-1].kind == "confirm", verdict


# The dropped link 1<->3 on four test hosts, as a clean clone measured it under load (four workers): the link named
# from groups that never started, then the confirm stage's 0+1+2 (node 3 left out) completed at 0.0498 GB/s against
# a 0.0525 floor. The plan said "not single" from that one slow run; a rest only slow is run again first.
def replay_confirm(again: float | None) -> tuple[IsolateVerdict, list[Stage]]:
    def measured(step: Stage, g: tuple[int, ...]) -> float | None:
        if g == (0, 1, 2) and step.kind in ("confirm", "again"):
            return 0.05 if step.kind == "confirm" else again
        return WELL

    return dropped_1_3(measured)


def test_must_not_the_rest_slow_once_beside_a_dropped_link_make_it_not_single() -> None:
    verdict, stages = replay_confirm(0.35)
    assert (verdict.kind, verdict.nodes) == (LINK, (1, 3)), verdict
    assert "again" in [s.kind for s in stages], stages


def test_must_fire_the_rest_failing_when_run_again_is_a_second_fault() -> None:
    verdict, stages = replay_confirm(None)
    assert verdict.kind == NOT_SINGLE and "without node" in verdict.message, verdict
    assert [s.kind for s in stages][-1] == "again", stages


def test_the_rest_slow_again_beside_a_link_that_stopped_its_groups_keeps_the_link_and_says_the_rest_was_slow() -> None:
    """Measured under load (a clean clone, a busy fail-slow job beside it): the rest 0+1+2 at 0.030 and 0.036 GB/s
    against a 0.041 floor. The link stopped every group that held it; slowness against a floor the other groups set
    does not outweigh that: the link stays named, the rest's slowness said beside it, undecided."""
    verdict, stages = replay_confirm(0.05)
    assert (verdict.kind, verdict.nodes, verdict.also_slow) == (LINK, (1, 3), (0, 1, 2)), verdict  # as it ran
    assert "without node 3" in verdict.message and "cannot tell apart" in verdict.message, verdict
    assert [s.kind for s in stages][-1] == "again", stages


def slow_0_1(rest: float) -> tuple[IsolateVerdict, list[Stage]]:
    """The link 0<->1 slow (every group holding it completes at 0.001 GB/s), the confirm stage's 0+2+3 (node 1 left
    out, after 1+2+3 set the floor of three nodes) at ``rest``."""

    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        if len(g) == 1:
            return GroupRun(g, True)
        bw = 0.001 if {0, 1} <= set(g) else rest if g == (0, 2, 3) else WELL
        return GroupRun(g, True, (("all_reduce", bw),))

    return replayed(answer)


def test_must_not_a_link_named_from_its_slowness_keeps_its_name_when_the_rest_is_as_slow_twice() -> None:
    """Slow against slow weighs alike: a second slow group is a second fault, not single (no also_slow)."""
    verdict, _ = slow_0_1(WELL)
    assert (verdict.kind, verdict.nodes) == (LINK, (0, 1)) and verdict.also_slow == (), verdict
    verdict, stages = slow_0_1(0.05)
    assert verdict.kind == NOT_SINGLE and verdict.also_slow == () and stages[-1].kind == "again", verdict


def test_must_not_the_rest_slow_twice_against_a_given_floor_is_kept_beside_a_dropped_link() -> None:
    """Against a floor the user gave, slow is a fault of its own: two faults, not single."""

    def answer(step: Stage, g: tuple[int, ...]) -> GroupRun:
        if len(g) == 1:
            return GroupRun(g, True)
        if {1, 3} <= set(g):
            return GroupRun(g, False, (), "the ranks never started")
        return GroupRun(g, True, (("all_reduce", 0.05 if g == (0, 1, 2) else WELL),))

    done: list[StageResult] = []
    while not isinstance(step := next_step(4, done, floor_gbps=0.1), IsolateVerdict):
        done.append(StageResult(step, tuple(answer(step, g) for g in step.groups)))
    assert step.kind == NOT_SINGLE and step.also_slow == (), step


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_a_dropped_link_with_a_slow_end_replays_as_planned_and_names_a_planted_node(n: int) -> None:
    """Found by a reviewer: n=3, the link 2-0 dropped and node 0 slow made the plan ask another swap than the one it
    had run (its partners were ordered by nodes proven against today's floor, which rose since), and smoke
    --isolate stopped on "stage 3 ran ... the plan asks ...". Which nodes are proven is fixed as each stage ended."""
    for a, b in itertools.permutations(range(n), 2):
        verdict, _ = isolate(Cluster(n, links=frozenset({frozenset({a, b})}), slow=frozenset({b})))
        assert verdict.kind != HEALTHY and set(verdict.nodes) & {a, b}, (a, b, verdict)


def test_a_verdict_posted_to_the_other_nodes_reads_back_whole() -> None:
    """Node 0 posts the verdict on the store and every node renders what it reads back (also_slow was left out of
    the post at first: the JSON report lost it)."""
    verdict, _ = replay_confirm(0.05)
    assert verdict.also_slow
    assert verdict_from_json(json.loads(json.dumps({**verdict.to_json(), "runs": 7}))) == verdict
