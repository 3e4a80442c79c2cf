"""NCCL RAS (the client against a server on loopback: tests/integration/watch/test_ras_integration.py): the
JSON reply as src/ras/client_support.cc prints it, the text reply of an NCCL older than 2.28.7 (docs' example), and
the judgement of replies over time: who is behind by the operation counts, a frozen job, a dead process."""

from __future__ import annotations

from collections.abc import Sequence

from ras_replies import comm, nccl_json

from ncclcheck.analysis.ras import judge, ours
from ncclcheck.analysis.watch.flight import with_outside
from ncclcheck.collectors.ras import address
from ncclcheck.model.findings import Finding
from ncclcheck.model.ras import RasStatus, status_from_json
from ncclcheck.model.watch import Verdict, WatchState


def replies(*counts: Sequence[int], every: float = 5.0, **extra: object) -> list[RasStatus]:
    return [status_from_json(nccl_json([comm(c, **extra)]), i * every) for i, c in enumerate(counts)]


PIDS = {4000 + r: r for r in range(8)}


def test_the_address_is_nccl_ras_addr_or_its_default() -> None:
    assert address({}) == ("localhost", 28028)
    assert address({"NCCL_RAS_ADDR": "10.0.0.7:29000"}) == ("10.0.0.7", 29000)
    assert address({"NCCL_RAS_ADDR": "[::1]:29001"}) == ("::1", 29001)
    assert address({"NCCL_RAS_ADDR": "node7"}) == ("node7", 28028)


def test_the_2_28_9_reply_without_its_comma_is_read() -> None:
    status = status_from_json(nccl_json([comm([1, 1], missing=[{"rank": 2, "host": "n", "pid": 9}])], comma=False), 0)
    assert len(status.comms[0].ranks) == 2 and status.comms[0].missing[0].pid == 9


def test_a_rank_behind_in_frozen_counts_is_named_by_its_global_rank() -> None:
    polls = replies([42, 42, 41, 42], [42, 42, 41, 42], [42, 42, 41, 42])
    found = judge(polls, PIDS, stall_s=10)
    assert [f.id for f in found] == ["ras-behind"] and found[0].culprits == (2,), found
    assert "rank 2 (PID 4002 on node0) launched AllReduce only up to operation 41" in found[0].message
    assert "no count moved in 3 replies over 10 s" in found[0].message


def test_must_not_counts_that_move_or_agree_or_have_not_held_past_stall_are_a_hang() -> None:
    assert judge(replies([42, 41, 42, 42], [43, 43, 42, 43], [44, 44, 44, 43]), PIDS, stall_s=5) == ()
    assert judge(replies([42] * 4, [42] * 4, [42] * 4), PIDS, stall_s=5) == ()  # idle, every rank done: no wait
    assert judge(replies([42, 41, 42, 42], [42, 41, 42, 42]), PIDS, stall_s=10) == ()  # 5 s < --stall
    assert judge(replies([42, 41, 42, 42]), PIDS, stall_s=0) == ()  # one reply: nothing held yet


def test_one_rank_ahead_or_a_tie_names_nobody() -> None:
    ahead = judge(replies([43, 42, 42, 42], [43, 42, 42, 42], [43, 42, 42, 42]), PIDS, stall_s=10)
    assert [f.id for f in ahead] == ["ras-behind"] and not ahead[0].culprits
    assert "rank 0 (PID 4000 on node0) launched AllReduce operation 43, which the other 3 have not" in ahead[0].message
    tie = judge(replies([43, 43, 42, 42], [43, 43, 42, 42], [43, 43, 42, 42]), PIDS, stall_s=10)
    assert not tie[0].culprits and "as many ranks ahead as behind" in tie[0].message


def test_a_dead_process_and_a_rank_s_async_error_are_named() -> None:
    dead = replies([42, 42, 42], missing=[{"rank": 3, "host": "node0", "pid": 4003, "dead": True}])
    found = judge(dead, PIDS, stall_s=10)
    assert [f.id for f in found] == ["ras-dead"] and found[0].culprits == (3,)
    assert "rank 3 (PID 4003 on node0) considered dead" in found[0].message
    status = status_from_json(
        nccl_json(
            [
                {
                    "hash": "0x1",
                    "ranks": [
                        {"rank": 0, "host": "a", "pid": 4000, "counts": {}},
                        {"rank": 1, "host": "a", "pid": 4001, "counts": {}, "error": 2},
                    ],
                }
            ]
        ),
        0,
    )
    assert [(f.id, f.culprits) for f in judge([status], PIDS, 10)] == [("ras-error", (1,))]


def async_error(code: int) -> RasStatus:
    ranks = [{"rank": 0, "host": "a", "pid": 4000, "counts": {}}, {"rank": 1, "host": "a", "pid": 4001, "counts": {}}]
    ranks[1]["error"] = code
    return status_from_json(nccl_json([{"hash": "0x1", "ranks": ranks}]), 0)


def test_an_async_error_of_the_rank_s_own_names_it_and_one_of_the_peers_or_of_a_disagreement_does_not() -> None:
    """Seen on an H100 (gpu_check's mismatch case): rank 0 in all_reduce, rank 1 in a broadcast of another size;
    RAS said "rank 1 async error 5" (ncclInvalidUsage: NCCL's socket got more bytes than it expected) and run named
    rank 1 over a tie the Flight Recorder could not break. 6 (ncclRemoteError) is a peer going away."""
    for code in (2, 1, 3, 4):  # system, CUDA, internal, argument: the rank's own
        assert [(f.id, f.culprits) for f in judge([async_error(code)], PIDS, 10)] == [("ras-error", (1,))], code
    for code, words in ((5, "5 (invalid usage)"), (6, "6 (remote error)")):
        found = judge([async_error(code)], PIDS, 10)
        assert [(f.id, f.culprits) for f in found] == [("ras-error", ())], code
        assert f"async error {words}" in found[0].message and "names no culprit" in found[0].message


def test_a_reply_about_another_job_is_not_ours() -> None:
    status = replies([1, 1], pid0=9000)[0]
    assert not ours(status, PIDS) and ours(replies([1, 1])[0], PIDS)


def stalled_state(*findings: Finding) -> WatchState:
    from watch_states import job

    return WatchState(10.0, job(4), (), findings, Verdict("problem", "✗"))


def test_ras_goes_first_where_the_stacks_name_nobody_or_the_same_ranks_and_is_a_fact_otherwise() -> None:
    behind = judge(replies([42, 42, 41, 42], [42, 42, 41, 42], [42, 42, 41, 42]), PIDS, stall_s=10)
    nobody = Finding("stalled", "error", "rank 0-3 all wait at a CUDA synchronisation", ranks=(0, 1, 2, 3))
    first = with_outside(stalled_state(nobody), behind)
    assert first.findings[0].id == "ras-behind" and first.findings[0].culprits == (2,)
    assert first.verdict.status == "problem" and "ras-behind" in first.verdict.message
    same = Finding("straggler", "error", "rank 2 is not in any collective", ranks=(0, 1, 2, 3), culprits=(2,))
    assert with_outside(stalled_state(same), behind).findings[0].id == "ras-behind"
    other = Finding("straggler", "error", "rank 1 is not in any collective", ranks=(0, 1, 2, 3), culprits=(1,))
    added = with_outside(stalled_state(other), behind)
    assert [f.id for f in added.findings] == ["straggler", "ras-behind"] and added.findings[1].culprits == ()
    assert with_outside(stalled_state(other), ()) == stalled_state(other)
