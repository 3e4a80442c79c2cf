"""The Flight Recorder analysis on hand-built recorders (FrDump/FrEntry directly): stalls across sub-groups whose ranks
legitimately differ, and recorders whose windows differ (a wrapped ring buffer, an agent's tail), where naming a
rank would name an innocent one."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import defaultdict

import pytest

from ncclcheck.analysis.flight.match import analyse
from ncclcheck.analysis.watch.flight import culprits, exact
from ncclcheck.collectors.flight import parse
from ncclcheck.model.flight import FrDump, FrEntry, PgProgress, dump_from_json, dump_to_json


class Rank:
    """One rank's recorder, built in program order."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.entries: list[FrEntry] = []
        self.seq: dict[str, int] = {}
        self.p2p_seq: dict[str, int] = {}

    def coll(self, pg: str, state: str = "completed") -> None:
        self.seq[pg] = self.seq.get(pg, 0) + 1
        self._add(pg, self.seq[pg], 0, False, "all_reduce", "", state)

    def p2p(self, pg: str, op: str, peer: str, state: str = "completed") -> None:
        self.p2p_seq[pg] = self.p2p_seq.get(pg, 0) + 1
        self._add(pg, self.seq.get(pg, 0), self.p2p_seq[pg], True, op, peer, state)

    def _add(self, pg: str, seq: int, p2p: int, is_p2p: bool, op: str, peer: str, state: str) -> None:
        rid = len(self.entries)
        desc = "default_pg" if pg == "0" else f"group{pg}"
        size = ((1024,),)
        self.entries.append(
            FrEntry(rid, pg, desc, seq, p2p, is_p2p, "nccl", op, peer, size, size, ("Float",), ("Float",), state, "")
        )

    def dump(self, groups: list[tuple[str, tuple[int, ...]]]) -> FrDump:
        progress = tuple(PgProgress(pg, n, n, -1) for pg, n in self.seq.items())
        return FrDump(f"rank{self.rank}", self.rank, "2.10", tuple(groups), progress, tuple(self.entries))


def stages(last: dict[int, int], steps: int = 3) -> list[FrDump]:
    """Two pipeline stages, {0,1,2} (group 1, two all_reduces a step) and {3,4} (group 2, one a step), and a world
    all_reduce closing each step; ``last``: how many stage all_reduces each rank issues in the last step, where a rank
    whose stage partner is missing waits in its stage's collective and the others in the world one."""
    groups = [("0", (0, 1, 2, 3, 4)), ("1", (0, 1, 2)), ("2", (3, 4))]
    ranks = [Rank(r) for r in range(5)]
    usual = {r: 2 if r < 3 else 1 for r in range(5)}
    for step in range(steps + 1):
        final = step == steps
        for rank in ranks:
            pg = "1" if rank.rank < 3 else "2"
            n = last.get(rank.rank, usual[rank.rank]) if final else usual[rank.rank]
            mates = [r for r in range(5) if (r < 3) == (rank.rank < 3)]
            stuck = final and n > min(last.get(m, usual[m]) for m in mates)
            for k in range(n):
                rank.coll(pg, "started" if stuck and k == n - 1 else "completed")
            if not stuck:
                rank.coll("0", "started" if final else "completed")
    return [r.dump(groups) for r in ranks]


def test_a_stage_that_issues_fewer_collectives_than_another_is_not_a_skip() -> None:
    # rank 3 issues one stage all_reduce too many; rank 4 goes on to the world all_reduce as it did every step, with
    # fewer collectives behind it than stage {0,1,2} issue: that is its stage's program, not a skip
    found = analyse(stages({3: 2})).findings
    assert [f.id for f in found if f.severity == "error"] == ["fr-not-joined", "fr-not-joined"]
    assert all(4 not in f.culprits for f in found), [f.message for f in found]
    assert "skipped one" not in " ".join(f.message for f in found)


def test_a_rank_that_issues_fewer_than_every_earlier_step_is_named() -> None:
    for skipper in (4, 1):  # in the stage with fewer collectives a step, and in the one with more
        found = analyse(stages({skipper: 1 if skipper < 3 else 0})).findings
        assert [f.culprits for f in found if f.severity == "error"] == [(skipper,)], [f.message for f in found]
        assert "every earlier time: it skipped one" in found[0].message


def test_in_the_first_step_nobody_is_named_by_program_order() -> None:
    # no earlier step to go by: whether rank 4 skipped or rank 3 has an extra collective the recorders cannot tell,
    # and other ranks' counts are no measure (stages of the same size issue different numbers of collectives too)
    for last in ({3: 2}, {4: 0}):
        found = analyse(stages(last, steps=0)).findings
        assert all(f.culprits == () for f in found), [f.message for f in found]
        assert any("cannot tell which order is right" in f.message for f in found)


def test_sends_and_recvs_both_in_flight_are_not_unmatched_when_a_window_lost_its_start() -> None:
    # 9 sends 0->1, each received; the last pair is posted on both sides and in flight. Rank 1 also received once
    # from rank 2, so an agent's tail (each group's last 8 entries) holds 8 of rank 0's sends but 7 of rank 1's recvs
    groups = [("0", (0, 1, 2))]
    ranks = [Rank(r) for r in range(3)]
    for k in range(9):
        state = "started" if k == 8 else "completed"
        ranks[0].p2p("0", "send", "0->1", state)
        ranks[1].p2p("0", "recv", "1<-0", state)
        if k == 4:
            ranks[2].p2p("0", "send", "2->1")
            ranks[1].p2p("0", "recv", "1<-2")
    tails = [dump_from_json(json.loads(json.dumps(dump_to_json(r.dump(groups))))) for r in ranks]
    assert all(isinstance(d, FrDump) for d in tails)
    assert analyse([d for d in tails if d is not None]).findings == ()
    # the same in a ring buffer that wrapped: rank 0's first send is gone
    wrapped = [r.dump(groups) for r in ranks]
    wrapped[0] = dataclasses.replace(wrapped[0], entries=wrapped[0].entries[1:])
    assert analyse(wrapped).findings == ()


def test_a_send_waiting_where_the_peers_newest_recv_completed_is_unmatched_in_any_window() -> None:
    groups = [("0", (0, 1))]
    ranks = [Rank(r) for r in range(2)]
    for k in range(12):
        ranks[0].p2p("0", "send", "0->1", "started" if k == 11 else "completed")
        if k < 11:
            ranks[1].p2p("0", "recv", "1<-0")
    for dumps in ([r.dump(groups) for r in ranks], [dump_from_json(dump_to_json(r.dump(groups))) for r in ranks]):
        found = analyse([d for d in dumps if d is not None]).findings
        assert [(f.id, f.culprits) for f in found] == [("fr-p2p-unmatched", (1,))]


def test_p2p_peers_in_a_sub_group_are_its_local_ranks() -> None:
    # NCCL names a send by group ranks: in group 1 = global {1, 2, 3}, rank 2 (its rank 1) sending to rank 3 (its
    # rank 2) is "send 1->2"; rank 3 never posts the recv. The culprit is global rank 3, not 2 (the sender)
    groups = [("0", (0, 1, 2, 3)), ("1", (1, 2, 3))]
    ranks = [Rank(r) for r in range(4)]
    for r in ranks:
        r.coll("0")
    ranks[2].p2p("1", "send", "1->2", "started")
    found = analyse([r.dump(groups) for r in ranks]).findings
    assert [(f.id, f.ranks, f.culprits) for f in found] == [("fr-p2p-unmatched", (2, 3), (3,))]
    assert "rank 2 posted send" in found[0].message and "rank 3 never posted the matching recv" in found[0].message
    # and in group {2, 3} ("send 0->1"), whose local ranks are no members' global ranks at all
    groups = [("0", (0, 1, 2, 3)), ("1", (2, 3))]
    ranks = [Rank(r) for r in range(4)]
    ranks[2].p2p("1", "send", "0->1", "started")
    found = analyse([r.dump(groups) for r in ranks]).findings
    assert [(f.id, f.culprits) for f in found] == [("fr-p2p-unmatched", (3,))]


def gloo(rank: int, entries: list[tuple[str, int, int, bool]], status: dict[str, int]) -> FrDump:
    """A gloo recorder as torch writes it: ``entries`` (group name, local group id, seq, retired), pg_status keyed by
    the rank's local group ids, pg_config empty."""
    rows = [
        {
            "record_id": i,
            "pg_id": pg_id,
            "process_group": [pg, "default_pg" if pg == "0" else "undefined"],
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "profiling_name": "gloo:all_reduce",
            "input_sizes": [[4]],
            "output_sizes": [[4]],
            "input_dtypes": ["Float"],
            "output_dtypes": ["Float"],
            "state": "scheduled",
            "retired": retired,
            "is_p2p": False,
        }
        for i, (pg, pg_id, seq, retired) in enumerate(entries)
    ]
    counters = {k: {"last_enqueued_collective": n, "last_completed_collective": n} for k, n in status.items()}
    config = {"": {"name": "", "desc": "", "ranks": "[]"}}
    raw = json.dumps({"version": "2.10", "pg_config": config, "pg_status": counters, "entries": rows})
    dump = parse(f"fr_rank{rank}.json", rank, raw.encode())
    assert isinstance(dump, FrDump)
    return dump


def test_a_gloo_group_id_no_entry_names_does_not_make_a_rank_a_member_of_another_group() -> None:
    # pairs {0,1} (group "1") and {2,3} (group "2", their local id 1); ranks 2 and 3's buffers hold only world
    # all_reduces now, but pg_status still counts their local group 1. Rank 0 waits in its pair's #4, rank 1 in none
    pair = [e for s in range(1, 4) for e in (("1", 1, s, True), ("0", 0, s, True))]
    world = [("0", 0, s, s < 4) for s in range(1, 5)]
    dumps = [
        gloo(0, [*pair, ("1", 1, 4, False)], {"0": 3, "1": 4}),
        gloo(1, pair, {"0": 3, "1": 3}),
        gloo(2, world, {"0": 4, "1": 3}),
        gloo(3, world, {"0": 4, "1": 3}),
    ]
    rep = analyse(dumps)
    assert {g.pg: g.ranks for g in rep.groups}["1"] == (0, 1)
    pair_finding = next(f for f in rep.findings if f.message.startswith("process group 1,"))
    assert pair_finding.ranks == (0, 1) and "rank 2" not in pair_finding.message


def test_a_rank_waiting_in_a_recv_is_not_blamed_for_the_collective_it_never_reached() -> None:
    # each step rank 0 sends to rank 1, then all three all-reduce; in the last, rank 0 skips its send and goes on to
    # the all_reduce: rank 1 waits in its recv from rank 0. The one to name is rank 0, never rank 1
    groups = [("0", (0, 1, 2))]
    ranks = [Rank(r) for r in range(3)]
    for _ in range(3):
        ranks[0].p2p("0", "send", "0->1")
        ranks[1].p2p("0", "recv", "1<-0")
        for r in ranks:
            r.coll("0")
    ranks[1].p2p("0", "recv", "1<-0", "started")
    ranks[0].coll("0", "started")
    ranks[2].coll("0", "started")
    found = analyse([r.dump(groups) for r in ranks]).findings
    assert all(1 not in f.culprits for f in found), [f.message for f in found]
    assert [(f.id, f.culprits) for f in found if f.severity == "error"] == [("fr-p2p-unmatched", (0,))]
    joined = next(f for f in found if f.id == "fr-not-joined")
    assert "rank 1 never joined it: it waits in recv 1<-0" in joined.message
    # both ends posted and waiting (a transport stall): nobody is named
    ranks[0].p2p("0", "send", "0->1", "started")
    found = analyse([r.dump(groups) for r in ranks]).findings
    assert all(f.culprits == () for f in found), [f.message for f in found]


def _layout(rng: random.Random) -> dict[str, tuple[int, ...]]:
    """A world group and sub-groups as jobs make them: tensor x data parallel, pipeline stages, pairs."""
    n = rng.choice([4, 6, 8])
    groups, kind = {"0": tuple(range(n))}, rng.choice(["tp_dp", "stages", "pairs"])
    if kind == "tp_dp":
        tp = rng.choice([d for d in (2, 4) if n % d == 0])
        subs = [tuple(range(s, s + tp)) for s in range(0, n, tp)] + [tuple(range(o, n, tp)) for o in range(tp)]
    elif kind == "stages":
        cut = rng.randrange(1, n)
        subs = [tuple(range(cut)), tuple(range(cut, n))]
    else:
        subs = [(s, s + 1) for s in range(0, n, 2)]
    groups.update({str(i + 1): m for i, m in enumerate(subs)})
    return groups


def _hang(seed: int) -> tuple[list[FrDump], int, set[int]] | None:
    """A job whose groups issue different numbers of all_reduces a step, then a world one; in the last step one rank
    skips one or issues one too many. Ranks run until each waits in a collective some member never issues: the
    recorders then, the odd rank, and the ranks that wait (None when the change did not hang the job)."""
    rng = random.Random(seed)
    groups = _layout(rng)
    n, steps = len(groups["0"]), rng.randint(1, 4)
    per_step = {g: 1 if g == "0" else rng.randint(1, 3) for g in groups}
    programs = [
        [
            g
            for _ in range(steps)
            for g in [*(g for g in groups if g != "0" and r in groups[g] for _ in range(per_step[g])), "0"]
        ]
        for r in range(n)
    ]
    odd = rng.randrange(n)
    at = rng.randrange(len(programs[odd]) - len(programs[odd]) // steps, len(programs[odd]))
    if rng.random() < 0.5:
        del programs[odd][at]
    else:
        programs[odd].insert(at, rng.choice([g for g in groups if odd in groups[g]]))
    ranks = [Rank(r) for r in range(n)]
    issued: dict[tuple[str, int], set[int]] = defaultdict(set)
    waiting: dict[int, tuple[str, int]] = {}
    pos = [0] * n
    moved = True
    while moved:
        moved = False
        for r in range(n):
            if r in waiting and issued[waiting[r]] >= set(groups[waiting[r][0]]):
                del waiting[r]
            if r not in waiting and pos[r] < len(programs[r]):
                g = programs[r][pos[r]]
                pos[r] += 1
                ranks[r].seq[g] = seq = ranks[r].seq.get(g, 0) + 1
                issued[(g, seq)].add(r)
                waiting[r], moved = (g, seq), True
    if not waiting:
        return None
    for rank in ranks:  # the states as the recorders show them at the end
        seqs: dict[str, int] = {}
        for g in [g for g in programs[rank.rank][: pos[rank.rank]]]:
            seqs[g] = seqs.get(g, 0) + 1
            rank._add(
                g,
                seqs[g],
                0,
                False,
                "all_reduce",
                "",
                "completed" if issued[(g, seqs[g])] >= set(groups[g]) else "started",
            )
    return [r.dump(list(groups.items())) for r in ranks], odd, set(waiting)


@pytest.mark.parametrize("agents", [False, True])
def test_no_layout_of_groups_gets_a_waiting_rank_named(agents: bool) -> None:
    """Skips and extra collectives over tensor/data/pipeline layouts: a rank that waits is never named, unless it is
    the one that changed its program."""
    named = 0
    for seed in range(400):
        hang = _hang(seed)
        if hang is None:
            continue
        dumps, odd, waiting = hang
        if agents:
            dumps = [d for d in (dump_from_json(dump_to_json(d)) for d in dumps) if d is not None]
        found = exact(dumps)
        assert not {r for f in found for r in f.culprits} - {odd} & waiting, (seed, [f.message for f in found])
        named += culprits(found) == (odd,)
    assert named > 50  # and the analysis still names the odd rank often


# A collective queued behind another group's collective that never finished (a collective waited on makes the next
# one queue behind it on the GPU): the rank is not the culprit; that group's finding says who is (review)


def three_groups() -> tuple[list[tuple[str, tuple[int, ...]]], list[Rank]]:
    return [("0", (0, 1, 2)), ("1", (1, 2)), ("2", (0, 1))], [Rank(0), Rank(1), Rank(2)]


def test_must_not_a_rank_queued_behind_another_group_s_skipped_collective_is_the_culprit() -> None:
    groups, (r0, r1, r2) = three_groups()
    for r in (r0, r1, r2):
        r.coll("0")
    r1.coll("1")
    r2.coll("1")
    r1.coll("1", "started")  # rank 2 never issues group 1's #2
    r0.coll("2", "started")
    r1.coll("2", "scheduled")
    errors = [f for f in analyse([r.dump(groups) for r in (r0, r1, r2)]).findings if f.severity == "error"]
    assert errors and errors[0].culprits == (2,), errors
    assert not any(1 in f.culprits for f in errors), errors


def test_must_not_a_rank_queued_behind_another_group_s_transport_hang_is_blamed() -> None:
    groups, (r0, r1, r2) = three_groups()
    for r in (r0, r1, r2):
        r.coll("0")
    r1.coll("1", "started")
    r2.coll("1", "started")
    r0.coll("2", "started")
    r1.coll("2", "scheduled")
    found = analyse([r.dump(groups) for r in (r0, r1, r2)]).findings
    assert not any(f.culprits for f in found), found
    assert any("queued behind process group 1" in f.message for f in found), found


def test_must_not_a_cross_group_order_deadlock_names_one_rank_or_the_transport() -> None:
    groups = [("0", (0, 1)), ("1", (0, 1)), ("2", (0, 1))]
    r0, r1 = Rank(0), Rank(1)
    for r in (r0, r1):
        r.coll("1")
        r.coll("2")
    r0.coll("1", "started")
    r0.coll("2", "scheduled")
    r1.coll("2", "started")
    r1.coll("1", "scheduled")
    dumps = [
        dataclasses.replace(
            d, progress=tuple(PgProgress(p.pg, p.enqueued, p.enqueued - 1, p.enqueued - 1) for p in d.progress)
        )
        for d in (r.dump(groups) for r in (r0, r1))
    ]
    found = analyse(dumps).findings
    assert not any(f.culprits for f in found), found
    assert not any("transport does not" in f.fix for f in found), found
