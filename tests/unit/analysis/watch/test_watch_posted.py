"""Point-to-point ops no rank will match, from run's record (``analysis.watch.posted``); the order ranks ended in
(``first_to_fail``); which findings are hangs; when a Flight Recorder's blame goes first; a collective on the wrong
group from the calls c10d skipped. Must fire and must not, on hand-built evidence."""

from __future__ import annotations

import dataclasses

from ncclcheck.analysis.watch.ends import first_to_fail
from ncclcheck.analysis.watch.flight import overrides
from ncclcheck.analysis.watch.judge import hangs_in
from ncclcheck.analysis.watch.posted import unmatched
from ncclcheck.analysis.watch.subgroup import subgroup_wait
from ncclcheck.model.args import CallArgs, PostedOp, PostedOps, Skipped, posted_from_json
from ncclcheck.model.findings import Finding
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankSample, RankView

JOB = "/job/pipe.py"


def op(side: str, peer: int | None, seq: int, tag: int = 0, state: str = "pending", line: int = 10) -> PostedOp:
    call = {"send": "isend", "recv": "irecv"}[side]
    return PostedOp(side, call, peer, tag, "0", f"{JOB}:{line}", state, seq)


def rank(
    r: int,
    ops: tuple[PostedOp, ...] = (),
    collective: str | None = "wait",
    posted: dict[str, int] | None = None,
    site: str | None = None,
) -> RankView:
    counts = tuple((posted or {}).items()) or tuple(
        (f"{o.op}:{'any' if o.peer is None else o.peer}", sum(1 for q in ops if (q.op, q.peer) == (o.op, o.peer)))
        for o in ops
    )
    sample = RankSample(
        r, r, 100 + r, "n", "sleeping", 0.0, 1, 1, 1.0, 0, (Frame("f", JOB, 10),), None, p2p=PostedOps(ops, counts)
    )
    return RankView(sample, collective, site or f"{JOB}:10 (f)", collective or "f", 9, 9, 9, 9, 9, 0.0, False)


def test_a_send_to_the_wrong_stage_names_the_sender() -> None:
    views = [
        rank(0, (op("send", 1, 1, state="completed"),), "barrier"),
        rank(1, (op("send", 0, 2),)),
        rank(2, (op("recv", 1, 1),)),
    ]
    found = unmatched(views, views)
    assert found is not None and (found.id, found.culprits) == ("p2p-wrong-peer", (1,))
    assert "rank 1's destination is wrong: it names rank 0 where rank 2 expects it" in found.message


def test_different_tags_name_both_sides() -> None:
    views = [rank(0, (op("send", 1, 1, tag=1),), "send"), rank(1, (op("recv", 0, 1, tag=2),), "recv")]
    found = unmatched(views, views)
    assert found is not None and (found.id, found.culprits) == ("p2p-tag-mismatch", (0, 1))


def test_one_receive_too_many_names_the_receiver_and_the_earlier_request() -> None:
    early = op("recv", 0, 1, line=8)
    views = [
        rank(0, (op("send", 1, 1, state="completed"),), "barrier"),
        rank(1, (early, op("recv", 0, 2, line=9)), "recv"),
    ]
    found = unmatched(views, views)
    assert found is not None and (found.id, found.culprits) == ("p2p-unmatched", (1,))
    assert "it posted 2 receives from rank 0, and rank 0 sent it 1" in found.message
    assert "its earlier irecv at pipe.py:8 (never waited on) took the message" in found.message


def test_an_op_whose_peer_posts_nothing_and_counts_that_agree_blames_nobody() -> None:
    views = [rank(0, (), "barrier"), rank(1, (op("recv", 0, 1),), "recv")]
    found = unmatched(views, views)
    assert found is not None and found.culprits == () and "cannot tell which side is wrong" in found.message


def test_must_not_ops_that_match_or_a_peer_that_may_yet_post_are_not_this() -> None:
    matched = [rank(0, (op("send", 1, 1),), "send"), rank(1, (op("recv", 0, 1),), "recv")]
    assert unmatched(matched, matched) is None  # both posted: the transport's, not the code's
    busy = rank(0, (), None)
    waiting = rank(1, (op("recv", 0, 1),), "recv")
    assert unmatched([waiting], [busy, waiting]) is None  # rank 0 still computes: it may send yet
    anyone = [rank(0, (), "barrier"), rank(1, (op("recv", None, 1),), "recv")]
    assert unmatched(anyone, anyone) is None  # from any source: nothing to name


def test_the_hooks_answer_reads_back() -> None:
    answer = {
        "rank": 1,
        "ops": [
            {
                "op": "recv",
                "call": "recv",
                "peer": 0,
                "tag": 0,
                "group": "0",
                "site": "a.py:3",
                "state": "pending",
                "seq": 2,
            },
            {"op": "bogus"},
        ],
        "posted": {"recv:0": 2},
        "skipped": [{"call": "all_reduce", "site": "a.py:9", "ranks": [2, 3]}],
    }
    read = posted_from_json(answer)
    assert read is not None and read.count("recv", 0) == 2 and read.count("send", 0) == 0
    assert [o.peer for o in read.pending()] == [0] and read.skipped == (Skipped("all_reduce", "a.py:9", (2, 3)),)
    assert posted_from_json(read.to_json()) == read and posted_from_json({"ops": "x"}) is None


def gone(r: int, code: int | None, ended: float | None) -> RankView:
    sample = RankSample(r, r, 100 + r, "n", "gone", 0.0, 0, 0, None, None, (), None, code, ended=ended)
    return RankView(sample, None, None, "gone", 0, 0, 0, 0, 0, None, False)


def test_the_rank_that_ended_first_is_the_cause_and_sigterm_never_is() -> None:
    assert first_to_fail([gone(0, -15, 10.4), gone(1, 1, 10.1)])[0] == (1,)
    assert first_to_fail([gone(0, -15, 10.4), gone(1, -9, 10.1)])[0] == (1,)
    culprits, words = first_to_fail([gone(0, 1, 10.4), gone(1, 0, 10.1)])
    assert culprits == () and "if rank 1 left the loop early" in words  # or all had finished: not told apart


def test_must_not_sigterm_alone_or_a_clean_finish_or_unknown_codes_blame_anyone() -> None:
    assert first_to_fail([gone(0, -15, 10.0), gone(1, -15, 10.1)])[0] == ()
    assert first_to_fail([gone(0, 0, 10.0), gone(1, 0, 10.1)]) == ((), "")
    assert first_to_fail([gone(0, None, 10.0), gone(1, 1, 10.1)])[0] == ()
    assert first_to_fail([gone(0, -15, None), gone(1, 1, None)])[0] == (1,)  # untimed: SIGTERM is the launcher's
    culprits, words = first_to_fail([gone(0, 1, 10.4), gone(1, None, None)])  # rank 1 ended before watching began
    assert culprits == () and "may have failed for want of it" in words


def test_a_slow_job_or_an_end_is_no_hang_a_straggler_warning_is() -> None:
    slow = Finding("slow-rank", "warning", "x", culprits=(2,))
    straggler = Finding("straggler", "warning", "x", culprits=(1,))
    assert hangs_in((slow, Finding("finished", "warning", "x"), Finding("exited", "warning", "x"))) == ()
    assert hangs_in((slow, straggler)) == (straggler,)


def test_a_recorders_blame_goes_first_unless_the_stacks_followed_those_ranks_further() -> None:
    fr = (Finding("fr-not-joined", "error", "x", ranks=(0, 1, 2), culprits=(1, 2)),)
    followed = (Finding("p2p-wrong-peer", "error", "x", ranks=(0, 1, 2), culprits=(1,)),)
    assert not overrides(followed, fr)
    assert overrides((Finding("subgroup-wait", "error", "x", ranks=(0, 1, 2), culprits=()),), fr)
    assert overrides((Finding("mismatch", "error", "x", ranks=(0, 1, 2), culprits=(0,)),), fr)


def test_a_rank_that_ran_the_waiting_line_with_a_group_it_is_not_in_chose_the_wrong_group() -> None:
    site = f"{JOB}:30"
    sub = RankView(
        RankSample(0, 0, 100, "n", "sleeping", 0.0, 1, 1, 1.0, 0, (Frame("f", JOB, 30),), None),
        "all_reduce",
        f"{site} (f)",
        "all_reduce",
        9,
        9,
        9,
        9,
        9,
        0.0,
        False,
        args=CallArgs("all_reduce", group="other"),
    )
    wrong = PostedOps((), (), (Skipped("all_reduce", site, (2, 3)),))
    others = [
        dataclasses.replace(
            rank(r, (), "barrier", site=f"{JOB}:31 (f)"),
            sample=dataclasses.replace(rank(r).sample, p2p=wrong if r == 1 else PostedOps(())),
        )
        for r in (1, 2, 3)
    ]
    found = subgroup_wait([sub, *others])
    assert found is not None and found.culprits == (1,) and "rank 1 ran that line (pipe.py:30)" in found.message
    # a non-member running the line with rank 0's own group (it holds rank 0) only is not in it: nobody named
    member = PostedOps((), (), (Skipped("all_reduce", site, (0, 1)),))
    others = [dataclasses.replace(o, sample=dataclasses.replace(o.sample, p2p=member)) for o in others]
    found = subgroup_wait([sub, *others])
    assert found is not None and found.culprits == ()


def test_without_runs_record_the_locals_tags_tell_a_tag_mismatch_from_a_stalled_transport() -> None:
    from ncclcheck.analysis.watch.waitfor import p2p_deadlock
    from ncclcheck.model.args import P2P

    def blocking(r: int, args: CallArgs) -> RankView:
        sample = RankSample(r, r, 100 + r, "n", "sleeping", 0.0, 1, 1, 1.0, 0, (Frame("f", JOB, 10),), None)
        return RankView(sample, args.op, f"{JOB}:{10 + r} (f)", args.op, 9, 9, 9, 9, 9, 0.0, False, args=args)

    send = blocking(0, CallArgs("send", dst=1, tag=1, group="default", p2p=(P2P("send", 1, 1),)))
    recv = blocking(1, CallArgs("recv", src=0, tag=2, group="default", p2p=(P2P("recv", 0, 2),)))
    found = p2p_deadlock([send, recv], 2)
    assert found is not None and (found.id, found.culprits) == ("p2p-tag-mismatch", (0, 1))
    assert "with tag 1" in found.message and "with tag 2" in found.message
    same = blocking(1, CallArgs("recv", src=0, tag=1, group="default", p2p=(P2P("recv", 0, 1),)))
    assert p2p_deadlock([send, same], 2) is None  # they match: what holds them is the transport's


def test_a_request_wait_whose_peers_run_records_is_answered_as_quickly_as_a_collective() -> None:
    """Both ranks asleep in ``req.wait()`` of a batch holding only a receive: with run's record the peers are known
    and the deadlock is told within the quick window; without it, only a stall after --stall could be said."""
    from watch_states import job, states

    from ncclcheck.model.args import FrameLocals

    work = "<torch._C._distributed_c10d.Work at 0x7f1>"

    def waiting(r: int, record: bool) -> RankSample:
        frames = (Frame("exchange", JOB, 40),)
        held = (FrameLocals("exchange", JOB, 40, (("reqs", f"[{work}]"),)),)
        ops = PostedOps((op("recv", 1 - r, 1, line=38),), (("recv:" + str(1 - r), 1),)) if record else None
        return RankSample(r, r, 100 + r, "n", "sleeping", 0.0, 1, 1, 1.0, 0, frames, None, locals=held, p2p=ops)

    quick = states(job(2), *[{r: waiting(r, True) for r in (0, 1)}] * 4, every=1.0, stall=60.0)
    assert [(f.id, f.culprits) for f in quick.findings] == [("p2p-deadlock", (0, 1))], quick.findings
    blind = states(job(2), *[{r: waiting(r, False) for r in (0, 1)}] * 4, every=1.0, stall=60.0)
    assert blind.findings == ()  # peers unknown: nothing before --stall
