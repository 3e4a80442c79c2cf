"""``smoke --isolate``'s plan: from the stages run so far, the next stage or the verdict (pure, no I/O).

Each node alone first (a node that fails by itself is named at once); then the nodes two by two, all pairs at
once (one node whose network is bad fails its pair, and a swap with nodes that passed tells the node from the
link); then halves, and a probe across the boundary of two halves that pass alone; a boundary that fails is
bisected, both sides at once, down to the one link. A stage's groups are disjoint and run at the same time, so
one bad node costs 3 stages and one bad link about 2·log2(N), whatever N.

A group passes when every node's smoke passed and no op's busbw is below the floor: the one given, else
``FLOOR_SHARE`` of the median over nodes of each node's best busbw of that op in groups of the same size that
completed so far (a healthy majority of nodes sets it; a node alone has no network to judge).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import chain

from ncclcheck.model.isolate import (
    AGAIN,
    ALONE,
    BOUNDARY,
    CONFIRM,
    CROSS,
    HALVES,
    HEALTHY,
    LINK,
    NODE,
    NOT_SINGLE,
    PAIRS,
    SWAP,
    GroupRun,
    IsolateVerdict,
    Judged,
    Stage,
    StageKind,
    StageResult,
)

FLOOR_SHARE = 0.25  # a group under a quarter of the majority's busbw is slow: a degraded link, not noise

Nodes = tuple[int, ...]


def next_step(nodes: int, done: Sequence[StageResult], floor_gbps: float | None = None) -> Stage | IsolateVerdict:
    """The stage to run next on ``nodes`` nodes given the results ``done`` (in the order run), or the verdict."""
    asked = _Asked(tuple(range(nodes)), done, judge(done, floor_gbps), _judged_now(done, floor_gbps))
    asked.floor_given = floor_gbps is not None  # the healthy verdict says how busbw was judged
    try:
        return _confirmed(_isolate(asked), asked)
    except _Need as need:
        return need.stage


def judge(done: Sequence[StageResult], floor_gbps: float | None = None) -> tuple[tuple[Judged, ...], ...]:
    """Every stage's runs judged against the floor known once that stage ended."""
    seen: list[GroupRun] = []
    judged = []
    for result in done:
        seen += [run for run in result.runs if len(run.nodes) > 1 and run.completed]
        floors = busbw_floors(seen, floor_gbps)
        judged.append(tuple(_judged(run, floors) for run in result.runs))
    return tuple(judged)


def _judged_now(done: Sequence[StageResult], floor_gbps: float | None) -> tuple[tuple[Judged, ...], ...]:
    """Every stage judged against the floor all runs so far set: an early pair of one slow node and one other,
    compared with nothing then, is slow now."""
    floors = busbw_floors(
        [run for result in done for run in result.runs if len(run.nodes) > 1 and run.completed], floor_gbps
    )
    return tuple(tuple(_judged(run, floors) for run in result.runs) for result in done)


def busbw_floors(runs: Sequence[GroupRun], floor_gbps: float | None) -> dict[tuple[str, int], float]:
    """Each (op, group size)'s floor: the one given, else a share of the median over nodes of each node's best
    busbw in groups of that size.

    Over nodes, not runs: one slow node is in most of the runs a bisection makes, but it is one node of many.
    By group size: gloo's all_gather does not keep busbw as the group grows (measured: 4 healthy test hosts at
    an eighth of two), so only groups of one size are compared. One run of a size is judged against itself.
    """
    best: dict[tuple[str, int], dict[int, float]] = {}
    for run in runs:
        for op, busbw in run.busbw_gbps:
            by_node = best.setdefault((op, len(run.nodes)), {})
            for node in run.nodes:
                by_node[node] = max(by_node.get(node, 0.0), busbw)
    if floor_gbps is not None:
        return dict.fromkeys(best, floor_gbps)
    return {key: FLOOR_SHARE * statistics.median(by_node.values()) for key, by_node in best.items()}


def _judged(run: GroupRun, floors: dict[tuple[str, int], float]) -> Judged:
    if len(run.nodes) < 2:  # a node alone has no network to judge: only whether its smoke passed
        return Judged(run, run.completed, ())
    size = len(run.nodes)
    slow = tuple((op, busbw, floors[op, size]) for op, busbw in run.busbw_gbps if busbw < floors.get((op, size), 0.0))
    return Judged(run, run.completed and not slow, slow)


class _Need(Exception):
    """The plan needs a stage not run yet: control leaves the walk with it."""

    def __init__(self, stage: Stage) -> None:
        super().__init__(stage.kind)
        self.stage = stage


class _Asked:
    """Replays the stages run so far in the walk's order; the first stage not run yet ends the walk."""

    def __init__(self, everyone: Nodes, done: Sequence[StageResult], *judged: tuple[tuple[Judged, ...], ...]) -> None:
        self.everyone, self.done, self.next = everyone, done, 0
        self.judged, self.now = judged  # as each stage ended (the plan followed it), and against today's floor
        # nodes that passed in a group with another node (as judged when it ended: a floor that rose since must not
        # change which stages the walk chose, or the stages run are no longer the ones it asks): their network works
        self.proven: set[int] = set()
        self.passed: set[Nodes] = set()
        self.excused: set[Nodes] = set()  # slow once, but no slower than each of its nodes with other nodes
        self.slow_ops: dict[Nodes, frozenset[str]] = {}  # each group's ops under the floor in its latest run
        self.repeated: set[Nodes] = set()  # pairs run again after they were only slow
        self.floor_given = False

    def run(self, kind: StageKind, groups: Sequence[Nodes]) -> tuple[bool, ...]:
        stage = Stage(kind, tuple(groups))
        if self.next >= len(self.done):
            raise _Need(stage)
        if self.done[self.next].stage != stage:
            raise ValueError(f"stage {self.next} ran {self.done[self.next].stage}, the plan asks {stage}")
        then = _passed(stage, self.judged[self.next])
        for one in self.judged[self.next]:
            self.slow_ops[one.run.nodes] = frozenset(op for op, _, _ in one.slow_ops)
        self.next += 1
        for group, ok in zip(stage.groups, then):
            if ok and len(group) > 1:
                self.passed.add(group)
            if ok and len(group) > 1:  # as judged then: the stages it chose are replayed as chosen
                self.proven.update(group)
        return then

    def groups_run(self) -> set[Nodes]:
        return {one.nodes for result in self.done[: self.next] for one in result.runs}

    def completed(self, group: Nodes) -> bool:
        """Whether ``group``'s latest run so far completed (slow or not)."""
        for result in reversed(self.done[: self.next]):
            for one in result.runs:
                if one.nodes == group:
                    return one.completed
        return False

    def busbw(self, group: Nodes) -> dict[str, float]:
        """``group``'s busbw in its latest completed run so far (empty when none completed)."""
        for result in reversed(self.done[: self.next]):
            for one in result.runs:
                if one.nodes == group and one.completed:
                    return dict(one.busbw_gbps)
        return {}


def _passed(stage: Stage, judged: tuple[Judged, ...]) -> tuple[bool, ...]:
    by_nodes = {j.run.nodes: j for j in judged}
    return tuple(g in by_nodes and by_nodes[g].passed for g in stage.groups)  # a group with no run failed


def _isolate(asked: _Asked) -> IsolateVerdict:
    everyone = asked.everyone
    alone = asked.run(ALONE, [(n,) for n in everyone])
    bad = [n for n, ok in zip(everyone, alone) if not ok]
    if len(bad) == 1:
        return IsolateVerdict(NODE, (bad[0],), f"node {bad[0]} fails alone, without any other node")
    if bad:
        return _several(bad, "fail alone")
    if len(everyone) == 1:
        return _healthy(asked)
    pairs = [everyone[i : i + 2] for i in range(0, len(everyone) - 1, 2)]
    failing = _hard_first([p for p, ok in zip(pairs, asked.run(PAIRS, pairs)) if not ok], asked)
    if len(failing) > 1:
        return _several(sorted(chain(*failing)), "fail in more than one pair")
    named = _suspect_pair(failing[0], asked) if failing else None
    if named:
        return named
    if len(everyone) % 2:  # the odd node out in a pair too: busbw is compared between groups of one size
        odd = (everyone[0], everyone[-1])
        named = _suspect_pair(odd, asked) if asked.run(SWAP, [odd]) == (False,) else None
        if named:
            return named
    return _bisect(everyone, asked, known_failing=False)


def _confirmed(verdict: IsolateVerdict, asked: _Asked) -> IsolateVerdict:
    """A node or link named, the rest of the nodes run without it (each end of a link in turn): a second fault
    elsewhere makes it not a single node. A rest that completed, only under the floor, is run once more and is a
    second fault only when it is slow again (a loaded node slows one run: measured, the rest of a dropped link's
    nodes at 0.0498 GB/s against a 0.0525 floor once), as a pair is before a link is named.

    Slow twice weighs as much as what named the fault only where that was slowness too, or the floor was given: a
    node or link named from groups that never completed stays named, the rest that was only slow against a floor
    the other groups set said beside it (``also_slow``): measured under load, a dropped link's rest at 0.030 and
    0.036 GB/s against a 0.041 floor, and "not single" would have hidden the one link that stopped every group."""
    if verdict.kind not in (NODE, LINK):
        return verdict
    slow: list[tuple[int, Nodes]] = []
    for left_out in verdict.nodes:
        rest = tuple(n for n in asked.everyone if n != left_out)
        if len(rest) > 1 and rest not in asked.passed and asked.run(CONFIRM, [rest]) == (False,):
            if asked.completed(rest) and asked.run(AGAIN, [rest]) == (True,):
                continue
            if asked.completed(rest) and not asked.floor_given and _stopped(verdict, asked):
                slow.append((left_out, rest))
                continue
            return _several(asked.everyone, f"fail: {verdict.message}, and the others fail without node {left_out} too")
    if not slow:
        return verdict
    also = tuple(sorted({n for _, rest in slow for n in rest}))  # the group that ran slow, as it ran
    without = " or ".join(f"node {left_out}" for left_out, _ in slow)
    return IsolateVerdict(
        verdict.kind,
        verdict.nodes,
        f"{verdict.message}; without {without} the others completed but ran under the busbw floor twice, a floor the"
        " other groups of their size set: a second, slower fault or a loaded node, which the stages cannot tell apart"
        " (give --busbw-floor to judge it)",
        also,
    )


def _stopped(verdict: IsolateVerdict, asked: _Asked) -> bool:
    """Whether the node or link named was named from groups that never completed (not from busbw alone)."""
    if verdict.kind == LINK:
        return not asked.completed(verdict.nodes)
    return any(verdict.nodes[0] in g and not asked.completed(g) for g in asked.groups_run())


def _suspect_pair(pair: Nodes, asked: _Asked) -> IsolateVerdict | None:
    """Two nodes that pass alone fail together: run each one not yet proven with another node, to tell which.
    None when the pair completed, only under a floor taken from other groups, and is no slower than each of its
    nodes with another node (a floor set by one fast pair: busbw noise, not the link)."""
    a, b = pair
    partners = sorted((n for n in asked.everyone if n not in pair), key=lambda n: n not in asked.proven)
    suspects = [n for n in pair if n not in asked.proven]
    if suspects and not partners:
        return IsolateVerdict(
            LINK,
            pair,
            f"nodes {a} and {b} fail together and pass alone; with two nodes, one node's network and"
            " the link between them look the same",
        )
    failed: list[int] = []
    leads: list[Nodes] = []  # swaps that did not complete where the pair did: another fault than the pair's
    for start in range(0, len(suspects), len(partners) or 1):
        swap = list(zip(suspects[start : start + len(partners)], partners))
        groups = [tuple(sorted(g)) for g in swap]
        before = set(asked.passed)
        ran = asked.run(SWAP, groups)
        for (suspect, _), g, ok in zip(swap, groups, ran):
            if ok or _passed_before(g, before, asked):
                continue
            if _reproduces(g, pair, asked):
                failed.append(suspect)
            elif not asked.completed(g):
                leads.append(g)
    if leads and not failed:  # the pair was only slow; a swap fails outright: follow that fault instead
        if len(leads) > 1:
            return _several(sorted(set(chain(*leads))), "fail outright in more than one pair")
        return _suspect_pair(leads[0], asked)
    if not failed and asked.completed(pair) and pair not in asked.repeated:  # only slow: a measurement, not a fault
        asked.repeated.add(pair)  # yet; a link is named only when it is slow again (a loaded node slows one run)
        if _slower_than_its_nodes(pair, asked) and asked.run(AGAIN, [pair]) == (True,):
            asked.excused.add(pair)
            asked.passed.add(pair)
            return None
    if not failed and not _slower_than_its_nodes(pair, asked):
        asked.excused.add(pair)
        asked.passed.add(pair)
        return None
    if not failed:
        return IsolateVerdict(
            LINK, pair, f"the link between nodes {a} and {b}: they fail together, each passes with other nodes"
        )
    if len(failed) == 1:
        other = b if failed[0] == a else a
        return IsolateVerdict(
            NODE,
            (failed[0],),
            f"node {failed[0]}'s network: it fails with node {other} and with another node, and passes alone",
        )
    return _several(pair, "each fail with other nodes too")


def _passed_before(group: Nodes, before: set[Nodes], asked: _Asked) -> bool:
    """A swap group that passed in an earlier stage, completed again and is only under a floor taken from groups
    measured since (none given): the floor rose, the group did not fail (busbw noise on a loaded node)."""
    return group in before and not asked.floor_given and bool(asked.busbw(group))


def _reproduces(swap: Nodes, pair: Nodes, asked: _Asked) -> bool:
    """Whether a failed swap group failed as ``pair`` did: both did not complete; or both completed slow and (no
    floor given) an op slow in both is within ``1/FLOOR_SHARE`` of the pair's busbw. A swap that fails outright
    where the pair was only slow (measured: a pair slow by noise, the swap across a dropped link) or the other way
    round, a swap slow in another op, or many times faster than the pair (measured on the test hosts: a rate-limited
    node's pair at 0.00095 GB/s, a swap of its partner at 0.0245 against a floor of 0.0653) did not reproduce the
    pair's failure: the confirm stage still runs the other nodes without the one named."""
    if asked.completed(swap) != asked.completed(pair):
        return False
    own, theirs = asked.busbw(swap), asked.busbw(pair)
    if not asked.completed(swap) or asked.floor_given:
        return True
    both = asked.slow_ops.get(swap, frozenset()) & asked.slow_ops.get(pair, frozenset())
    return any(own[op] * FLOOR_SHARE <= theirs[op] for op in both if op in own and op in theirs)


def _slower_than_its_nodes(pair: Nodes, asked: _Asked) -> bool:
    """Whether ``pair`` failed by itself: it did not complete, was under a given floor, or an op's busbw is under
    ``FLOOR_SHARE`` of every completed pair that holds one of its nodes with another node (none: it may be)."""
    own = asked.busbw(pair)
    if asked.floor_given or not own:
        return True
    others = [asked.busbw(g) for g in asked.groups_run() if len(g) == 2 and len(set(g) & set(pair)) == 1]
    for op, busbw in own.items():
        refs = [b[op] for b in others if op in b]
        if not refs or busbw < FLOOR_SHARE * min(refs):
            return True
    return False


def _bisect(group: Nodes, asked: _Asked, known_failing: bool) -> IsolateVerdict:
    """``group``'s pairs passed; its halves, then the boundary between two halves that pass alone."""
    if len(group) == 2 and known_failing:
        return _suspect_pair(group, asked) or _noisy(group)
    left, right = group[: len(group) // 2], group[len(group) // 2 :]
    halves = [h for h in (left, right) if len(h) > 1 and h not in asked.passed]
    failing = _hard_first([h for h, ok in zip(halves, asked.run(HALVES, halves) if halves else ()) if not ok], asked)
    if len(failing) == 2:
        return _several(group, "fail in both halves")
    if failing:
        return _bisect(failing[0], asked, known_failing=True)
    if not known_failing and (group in asked.passed or asked.run(BOUNDARY, [group]) == (True,)):
        return _healthy(asked)
    return _cross(left, right, asked)


def _cross(one: Nodes, two: Nodes, asked: _Asked) -> IsolateVerdict:
    """``one`` and ``two`` pass alone and fail together: run their parts across, down to one pair of nodes."""
    if len(one) == 1 and len(two) == 1:
        return _suspect_pair(tuple(sorted(one + two)), asked) or _noisy(tuple(sorted(one + two)))
    (a1, a2), (b1, b2) = _halve(one), _halve(two)
    failing: list[tuple[Nodes, Nodes]] = []
    for parts in (((a1, b1), (a2, b2)), ((a1, b2), (a2, b1))):
        crossing = [(x, y) for x, y in parts if x and y]
        groups = [tuple(sorted(x + y)) for x, y in crossing]
        failing += [c for c, ok in zip(crossing, asked.run(CROSS, groups)) if not ok]
        if failing and len(one) > 1 and len(two) > 1:
            break  # one link lies in one part of each side: the other crossing cannot hold it too
    hard = _hard_first([tuple(sorted(x + y)) for x, y in failing], asked)
    failing = [(x, y) for x, y in failing if tuple(sorted(x + y)) in hard]
    if len(failing) == 1:
        return _cross(*failing[0], asked)
    shared = {x for x, y in failing} if len(failing) == 2 else set()
    lone = next((side for side in shared if len(side) == 1 and side[0] not in asked.proven), None)
    if len(shared) == 1 and lone is not None:
        return IsolateVerdict(NODE, lone, f"node {lone[0]}'s network: it fails with every part of the other half")
    if not failing:
        return _several(tuple(sorted(one + two)), "fail only all together, never in parts")
    return _several(tuple(sorted(one + two)), "fail across in more than one part")


def _hard_first(failing: list[Nodes], asked: _Asked) -> list[Nodes]:
    """Of groups that failed in one stage, those that never completed, where some did and others only ran under the
    floor: a fault that stops a group is followed first. One only slow beside it may be noise (measured: a dropped
    link's cross group never started while the other cross group, healthy, ran under the floor on a loaded node,
    and the plan said "not single"); if it is a second fault, the confirm stage run without the one named finds
    it."""
    hard = [g for g in failing if not asked.completed(g)]
    return hard or failing


def _halve(nodes: Nodes) -> tuple[Nodes, Nodes]:
    return nodes[: (len(nodes) + 1) // 2], nodes[(len(nodes) + 1) // 2 :]


def _several(nodes: Sequence[int], how: str) -> IsolateVerdict:
    names = ", ".join(map(str, nodes))
    return IsolateVerdict(NOT_SINGLE, tuple(nodes), f"not a single node or link: nodes {names} {how}")


def _noisy(pair: Nodes) -> IsolateVerdict:
    """A larger group failed, and the one pair it comes down to is no slower than each of its nodes with others."""
    return _several(pair, "fail in a larger group; together they were no slower than each with other nodes")


def _healthy(asked: _Asked) -> IsolateVerdict:
    failed = [j for stage in asked.now for j in stage if not j.passed and j.run.nodes not in asked.excused]
    slow = sorted({n for j in failed for n in j.run.nodes})
    if slow:  # a group that passed when it was measured is under the floor the later groups set
        return _several(slow, "were slow against the floor the later stages set")
    how = "" if asked.floor_given else " (busbw compared between groups only: give --busbw-floor to judge it)"
    noisy = "; ".join(
        f"nodes {'+'.join(map(str, g))} were under the floor once, no slower than each with other nodes"
        for g in sorted(asked.excused)
    )
    return IsolateVerdict(
        HEALTHY, (), f"every stage passed: no node or link is named{how}" + (f"; {noisy}" if noisy else "")
    )
