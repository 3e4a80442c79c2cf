"""Fail-slow within process groups and along pipelines, pure: the slow stage of a pipeline (its neighbours wait for
it in send/recv), the slow rank of a tensor-parallel group (with the groups' members known, or through the
data-parallel collectives its replica's peers wait in); and nobody in a balanced 2-D job, a balanced pipeline, or a
pipeline whose first stage loads data by design."""

from __future__ import annotations

import dataclasses
import json

from test_watch_slow import DATA, N
from watch_states import all_in, job, sample, stack

from ncclcheck.analysis.watch.judge import Judging, track
from ncclcheck.analysis.watch.shares import tally
from ncclcheck.analysis.watch.slow import slowness, suspects
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.model.agent_line import AgentLines, groups_from_json
from ncclcheck.model.shares import Round
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankView, Snapshot, WatchState
from ncclcheck.sources.watch_nodes import NodesSource

TP, DP, RECV, SEND = 40, 50, 60, 61  # the lines of train.py: the tp and dp all_reduce, the stage's recv and send
Part = tuple[tuple[Frame, ...], float]  # a stack and its share of a round


def compute() -> tuple[Frame, ...]:
    return (Frame("compute", "/job/train.py", 32), Frame("main", "/job/train.py", 75))


def loader() -> tuple[Frame, ...]:
    return (Frame("_next_data", DATA, 785), Frame("main", "/job/train.py", 74))


def at(op: str, line: int) -> tuple[Frame, ...]:
    return stack(op, line, "main")


def rounds_of(rank: int, parts: list[Part], rounds: int = 6, jitter: float = 0.0) -> list[Round]:
    """``rounds`` rounds of ``N`` samples split as ``parts`` (the rest in compute(), busy), 2 s each from t=1000;
    ``jitter``: the first part's share moves up and down by that much from round to round."""
    out = []
    for i in range(rounds):
        shift = jitter * (1 if (i + rank) % 2 else -1)
        counts = [(s, round((w + shift if k == 0 else w) * N)) for k, (s, w) in enumerate(parts)]
        rest = N - sum(n for _, n in counts)
        stacks = tuple((s, n) for s, n in [*counts, (compute(), rest)] if n > 0)
        out.append(Round(1, 1000.0 + 2.05 * i, 1002.0 + 2.05 * i, stacks, 2.0 * rest / N))
    return out


def view(rank: int, parts: list[Part], rounds: int = 6, jitter: float = 0.0) -> RankView:
    tallies = tuple(tally(r) for r in rounds_of(rank, parts, rounds, jitter))
    return RankView(sample(rank, compute()), None, None, "compute", 0, 0, 0, 0, 0, None, True, tallies=tallies)


def watched(per_rank: dict[int, list[Round]], looks: int = 6, groups: tuple[frozenset[int], ...] = ()) -> WatchState:
    """Looks 2 s apart, every rank moving (new socket bytes each look), one round each from look 1 on."""
    j, state = job(len(per_rank)), None
    for i in range(looks):
        samples = {
            r: dataclasses.replace(s, net_bytes=i * 1000, rounds=tuple(per_rank[r][i - 1 : i]) if i else ())
            for r, s in all_in(len(per_rank), "recv", RECV).items()
        }
        state = track(
            state,
            Snapshot(i * 2.0, j, tuple(samples[r] for r in sorted(samples)), recording=True),
            Judging(10.0, groups=groups),
        )
    assert state is not None
    return state


def named(views: list[RankView], groups: tuple[frozenset[int], ...] = ()) -> dict[str, tuple[int, ...]]:
    return {f.id: f.culprits for f in slowness(views, False, groups)}


TP_GROUPS = (frozenset({0, 1}), frozenset({2, 3}))
DP_GROUPS = (frozenset({0, 2}), frozenset({1, 3}))


# --- pipelines: must fire ---


def test_the_slow_stage_of_a_pipeline_is_named_by_how_long_its_neighbours_wait_for_it() -> None:
    """Four stages, forward and backward one after the other: stage 2 computes twice as long, and the others wait
    for it in recv (forward from it, backward to it)."""
    views = [view(r, [(at("recv", RECV), 0.6), (at("send", SEND), 0.05)]) for r in (0, 1, 3)]
    views.insert(2, view(2, [(at("recv", RECV), 0.2), (at("send", SEND), 0.05)]))
    [f] = slowness(views, False)
    assert f.id == "slow-rank" and f.severity == "warning" and f.culprits == (2,)
    assert f.message.startswith(
        "Along the pipeline (stages wait for each other in send/recv): rank 2 holds the others back: ranks 0-1,3 "
        "wait for it in recv at train.py:60 65% of the time (rank 2: 25%)"
    )
    assert "it spends that time in compute() at train.py:32" in f.message
    assert dict(f.roles) == {2: "slow", 0: "waiting", 1: "waiting", 3: "waiting"}
    assert f.fix.startswith("balance the stages")


def test_a_first_stage_slow_in_its_data_loader_is_named_with_the_loader_fix() -> None:
    views = [view(0, [(loader(), 0.5), (at("recv", RECV), 0.1)])]
    views += [view(r, [(at("recv", RECV), 0.55)]) for r in (1, 2, 3)]
    [f] = slowness(views, False)
    assert f.culprits == (0,) and "waiting for its DataLoader at train.py:74" in f.message
    assert "num_workers" in f.fix


def test_a_pipeline_stage_that_waits_less_in_part_of_the_window_only_is_a_suspect_not_named() -> None:
    views = [view(r, [(at("recv", RECV), 0.6)], rounds=4) for r in (0, 1, 3)]
    odd = view(2, [(at("recv", RECV), 0.2)], rounds=4)
    balanced = view(2, [(at("recv", RECV), 0.6)], rounds=4)
    odd = dataclasses.replace(odd, tallies=odd.tallies[:3] + balanced.tallies[3:])
    views.insert(2, odd)
    assert named(views) == {}
    assert [r for r, _ in suspects(views, False)][:-1] == [2]


# --- pipelines: must not fire ---


def test_a_balanced_pipeline_names_nobody() -> None:
    views = [view(r, [(at("recv", RECV), 0.45), (at("send", SEND), 0.05)], jitter=0.05) for r in range(4)]
    assert named(views) == {} and suspects(views, False) == ()


def test_a_pipeline_whose_first_stage_loads_data_by_design_names_nobody() -> None:
    """Stage 0 spends part of its step in its DataLoader (the only stage that loads data) where the others compute:
    its time is its work, and the others wait for it no more than for each other."""
    views = [view(0, [(at("recv", RECV), 0.45), (loader(), 0.3)], jitter=0.05)]
    views += [view(r, [(at("recv", RECV), 0.45)], jitter=0.05) for r in (1, 2, 3)]
    assert named(views) == {} and suspects(views, False) == ()


def test_stages_waiting_only_in_send_and_recv_through_the_whole_window_are_no_slow_stage() -> None:
    """Every stage in recv the whole time but one that computes: a hang (or a stage stuck), not a pipeline's steps."""
    views = [view(r, [(at("recv", RECV), 1.0)]) for r in (0, 1, 2)] + [view(3, [])]
    assert named(views) == {}


def test_too_few_rounds_of_a_pipeline_say_nothing_yet() -> None:
    views = [view(r, [(at("recv", RECV), 0.6)], rounds=3) for r in (0, 1, 3)]
    views.insert(2, view(2, [(at("recv", RECV), 0.1)], rounds=3))
    assert named(views) == {}


# --- process groups: must fire ---


def test_the_slow_rank_of_a_tensor_parallel_group_is_named_while_the_data_parallel_ranks_look_alike() -> None:
    """tp x dp = 2 x 2: rank 1 is slow; rank 0 waits for it in the tp all_reduce, ranks 2-3 (the other replica)
    wait for both in the dp all_reduce. Named job-wide, the groups known or not."""
    slow = view(1, [(at("all_reduce", TP), 0.02), (at("all_reduce", DP), 0.02)])
    views = [view(0, [(at("all_reduce", TP), 0.5), (at("all_reduce", DP), 0.02)]), slow]
    views += [view(r, [(at("all_reduce", TP), 0.03), (at("all_reduce", DP), 0.5)]) for r in (2, 3)]
    assert named(views) == {"slow-rank": (1,)}
    assert named(views, TP_GROUPS + DP_GROUPS) == {"slow-rank": (1,)}


def test_the_slow_rank_of_a_group_whose_groups_do_not_wait_for_each_other_is_named_with_the_groups_known() -> None:
    """Two tensor-parallel groups never synchronised with each other (no data-parallel all_reduce): job-wide, the
    other group's ranks wait little too, and nobody can be named; within group 0-1, rank 1 is the slow one."""
    views = [view(0, [(at("all_reduce", TP), 0.55)]), view(1, [(at("all_reduce", TP), 0.02)])]
    views += [view(r, [(at("all_reduce", TP), 0.05)]) for r in (2, 3)]
    assert named(views) == {}
    [f] = slowness(views, False, TP_GROUPS)
    assert f.id == "slow-rank" and f.culprits == (1,)
    assert f.message.startswith(
        "In process group ranks 0-1: rank 1 holds the other back: rank 0 waits for it in all_reduce at "
        "train.py:40 55% of the time"
    )
    assert dict(f.roles) == {1: "slow", 0: "waiting"}


def test_each_group_s_slow_rank_is_named_in_its_group_where_the_others_do_not_wait_alike() -> None:
    """Two unsynchronised tensor-parallel pairs, each with a late rank (1 holds 0 back, 2 holds 3 back less): the
    others (0 and 3) wait unlike each other, so no job-wide "ranks 1-2 hold back ranks 0,3"; with the groups known,
    each pair names its own (a loaded machine made a real job show it: "ranks 1-2 hold the others back")."""
    views = [view(0, [(at("all_reduce", TP), 0.66)]), view(1, [(at("all_reduce", TP), 0.0)])]
    views += [view(2, [(at("all_reduce", TP), 0.0)]), view(3, [(at("all_reduce", TP), 0.4)])]
    assert named(views) == {}
    found = slowness(views, False, TP_GROUPS)
    assert [(f.id, f.culprits) for f in found] == [("slow-rank", (1,)), ("slow-rank", (2,))]
    assert found[0].message.startswith("In process group ranks 0-1: rank 1 holds the other back: rank 0 waits")
    assert found[1].message.startswith("In process group ranks 2-3: rank 2 holds the other back: rank 3 waits")


# --- process groups: must not fire ---


def test_a_balanced_two_dimensional_job_names_nobody() -> None:
    views = [view(r, [(at("all_reduce", TP), 0.2), (at("all_reduce", DP), 0.1)], jitter=0.05) for r in range(4)]
    assert named(views, TP_GROUPS + DP_GROUPS) == {} and suspects(views, False, TP_GROUPS + DP_GROUPS) == ()


def test_must_not_the_slow_rank_of_one_group_be_said_to_hold_back_a_group_that_never_waits_for_it() -> None:
    """Two unsynchronised tensor-parallel pairs, rank 1 slow in its own: pair 2-3 waits 15% of its time, each for
    the other (a loaded machine's real shares were 0.68, 0.01, 0.09, 0.11). Job-wide, "rank 1 holds back ranks 0,2-3"
    would be false (2-3 never wait for it): nobody is named there, and only the groups name rank 1."""
    views = [view(0, [(at("all_reduce", TP), 0.68)]), view(1, [(at("all_reduce", TP), 0.0)])]
    views += [view(r, [(at("all_reduce", TP), 0.15)], jitter=0.05) for r in (2, 3)]
    assert named(views) == {}
    [f] = slowness(views, False, TP_GROUPS)
    assert f.culprits == (1,) and f.message.startswith("In process group ranks 0-1: rank 1 holds the other back")


def test_a_group_with_a_member_not_seen_is_not_judged() -> None:
    views = [view(0, [(at("all_reduce", TP), 0.55)]), view(1, [(at("all_reduce", TP), 0.02)])]
    views += [view(r, [(at("all_reduce", TP), 0.05)]) for r in (2, 3)]
    assert named(views, (frozenset({0, 1, 7}),)) == {}


def test_the_whole_job_as_a_group_adds_nothing_to_the_job_wide_judgement() -> None:
    views = [view(0, [(at("all_reduce", TP), 0.55)]), view(1, [(at("all_reduce", TP), 0.02)])]
    views += [view(r, [(at("all_reduce", TP), 0.05)]) for r in (2, 3)]
    assert named(views, (frozenset(range(4)),)) == {}


def test_a_rank_that_waits_in_its_other_group_is_not_named_in_this_one() -> None:
    """Rank 1 waits in an all_gather of another of its groups, where rank 0 (its tp peer) is never seen: its low
    share in the tp all_reduce says nothing of whether it holds rank 0 back (it may itself be held there)."""
    views = [view(0, [(at("all_reduce", TP), 0.55)]), view(1, [(at("all_gather", 70), 0.3)])]
    views += [view(r, [(at("all_reduce", TP), 0.3)]) for r in (2, 3)]
    assert named(views) == {}
    assert named(views, TP_GROUPS) == {}


# --- through the watch's judge ---


def test_watch_names_the_slow_stage_and_its_verdict_is_a_warning() -> None:
    state = watched({r: rounds_of(r, [(at("recv", RECV), 0.2 if r == 2 else 0.6)]) for r in range(4)})
    assert [(f.id, f.culprits) for f in state.findings] == [("slow-rank", (2,))]
    assert state.verdict.status == "warning"


def test_watch_gives_a_balanced_pipeline_its_tick() -> None:
    state = watched({r: rounds_of(r, [(at("recv", RECV), 0.45)], jitter=0.05) for r in range(4)})
    assert state.findings == () and state.verdict.status == "ok", state.verdict


def test_watch_names_the_slow_rank_of_an_unsynchronised_group_once_the_groups_are_known_and_not_before() -> None:
    """The groups reach the judge in ``Judging.groups`` (the ranks' control planes, asked by the live source)."""
    per_rank = {r: rounds_of(r, [(at("all_reduce", TP), {0: 0.55, 1: 0.02}.get(r, 0.05))]) for r in range(4)}
    known = watched(per_rank, groups=TP_GROUPS)
    assert [(f.id, f.culprits) for f in known.findings] == [("slow-rank", (1,))]
    assert known.findings[0].message.startswith("In process group ranks 0-1: rank 1 holds the other back")
    assert all(f.id != "slow-rank" for f in watched(per_rank).findings)  # not known: nobody named


def test_must_fire_a_rank_waiting_more_than_the_others_is_never_given_a_tick_when_nobody_can_be_named() -> None:
    """Two unsynchronised groups, their members not known: rank 0 waits 55% of its time, the others 4-5% (as the
    real job measured: 67% against 3%). Nobody can be named, and the verdict says so (pending), never "none holds
    the others back"."""
    per_rank = {r: rounds_of(r, [(at("all_reduce", TP), {0: 0.55, 1: 0.04}.get(r, 0.05))]) for r in range(4)}
    state = watched(per_rank)
    assert state.verdict.status == "pending", state.verdict
    assert "rank 0 waits more than the others (55% of the time, against 5%)" in state.verdict.message
    assert "a member of its own process group" in state.verdict.message


def test_a_rank_below_others_that_do_not_wait_alike_is_said_unproven_for_that_reason_not_for_time() -> None:
    """Two unsynchronised pairs, rank 1 slow in its own, the groups not known: rank 1 waits least, rank 0 most;
    more rounds would not prove anything, and the verdict says why (never a tick, never "not proven yet")."""
    shares = {0: 0.68, 1: 0.0, 2: 0.15, 3: 0.15}
    state = watched(
        {r: rounds_of(r, [(at("all_reduce", TP), w)], jitter=0.05 if r > 1 else 0.0) for r, w in shares.items()}
    )
    assert state.verdict.status == "pending" and not state.findings, (state.verdict, state.findings)
    assert "rank 1 waits less than the others" in state.verdict.message
    assert "not proven: the others do not wait alike" in state.verdict.message
    assert "it must hold in each part" not in state.verdict.message
    assert "rank 0 waits more than the others" in state.verdict.message


def test_must_not_balanced_ranks_or_a_majority_that_waits_for_one_say_anyone_waits_more() -> None:
    balanced = {r: rounds_of(r, [(at("all_reduce", TP), 0.3)], jitter=0.05) for r in range(4)}
    assert watched(balanced).verdict.status == "ok"
    # ranks 1-3 wait for rank 0 (a checkpoint writer): that is rank 0 holding them back, never "waits more"
    majority = {r: rounds_of(r, [(at("all_reduce", TP), 0.02 if r == 0 else 0.55)]) for r in range(4)}
    state = watched(majority)
    assert "waits more" not in state.verdict.message and "wait more" not in state.verdict.message, state.verdict
    two = {r: rounds_of(r, [(at("all_reduce", TP), 0.55 if r == 0 else 0.02)]) for r in range(2)}
    assert "more than the others" not in watched(two).verdict.message  # of two ranks, the other one is named


# --- process groups across nodes: the agents' lines carry them to the viewer ---


def _node_lines(state: WatchState, node: int, groups: tuple[frozenset[int], ...]) -> list[str]:
    """Node ``node``'s agent lines (ranks 2N, 2N+1 of the four) for the looks of ``state``, the groups it read."""
    mine = tuple(v for v in state.ranks if v.rank // 2 == node)
    part = dataclasses.replace(state, job=job(4, 2, node), ranks=mine)
    lines = AgentLines(f"node{node}")
    return [json.dumps(lines.line(part, 1.8e9 + i, 1.0, groups=groups)) for i in range(2)]


def _viewed(per_rank: dict[int, list[Round]], groups: tuple[frozenset[int], ...]) -> WatchState:
    state = watched(per_rank)
    streams = Streams()
    for node in (0, 1):
        for line in _node_lines(state, node, groups):
            streams.add_line(line, 1.8e9 + 1)
    return NodesSource(10.0, 1.0, recorded=streams).poll()


def test_the_slow_rank_of_a_group_across_nodes_is_named_from_the_groups_the_agents_carry() -> None:
    """Groups 0+2 and 1+3, each across both nodes, never synchronised with each other: rank 2 (node1) holds rank 0
    (node0) back. The viewer gets the groups only from the agents' lines: named with them, not without."""
    across = (frozenset({0, 2}), frozenset({1, 3}))
    per_rank = {r: rounds_of(r, [(at("all_reduce", TP), {0: 0.55, 2: 0.02}.get(r, 0.05))]) for r in range(4)}
    state = _viewed(per_rank, across)
    assert [(f.id, f.culprits) for f in state.findings] == [("slow-rank", (2,))], state.findings
    assert state.findings[0].message.startswith("In process group ranks 0,2: rank 2 holds the other back")
    unknown = _viewed(per_rank, ())
    assert all(f.id != "slow-rank" for f in unknown.findings) and unknown.verdict.status == "pending"


def test_must_not_balanced_groups_across_nodes_name_anyone_from_the_groups_the_agents_carry() -> None:
    across = (frozenset({0, 2}), frozenset({1, 3}))
    per_rank = {r: rounds_of(r, [(at("all_reduce", TP), 0.05)], jitter=0.01) for r in range(4)}
    state = _viewed(per_rank, across)
    assert state.findings == () and state.verdict.status == "ok", (state.findings, state.verdict)


def test_an_agent_sends_the_groups_when_they_change_and_the_viewer_keeps_them() -> None:
    lines = AgentLines("node0")
    state = watched({r: rounds_of(r, [(at("all_reduce", TP), 0.05)]) for r in range(4)})
    tp, both = TP_GROUPS, TP_GROUPS + DP_GROUPS
    sent = [lines.line(state, 1.8e9 + i, 1.0, groups=g) for i, g in enumerate([(), tp, tp, both])]
    assert ["groups" in s for s in sent] == [False, True, False, True]
    streams = Streams()
    for s in sent[:3]:
        streams.add_line(json.dumps(s), 1.8e9)
    assert streams.reports["node0"].groups == tuple(sorted(tp, key=sorted))  # kept while unchanged
    for bad in ([[0, -1]], [[]], [["0"]], [[True]], "0,1", [[0.5]]):
        assert groups_from_json({"groups": bad}) is None, bad
