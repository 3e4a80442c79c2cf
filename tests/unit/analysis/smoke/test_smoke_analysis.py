"""Pure smoke analysis over hand-built data: fingerprint differences, heartbeats, per-node results, merged hangs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.rank_exits import hint, signal_of
from ncclcheck.analysis.smoke.fingerprint import differences
from ncclcheck.analysis.smoke.plan import OPS, Drill, PlanError, parse_drill
from ncclcheck.analysis.smoke.progress import first_failure, local_results, merge, rank_died, stalled_ranks
from ncclcheck.analysis.smoke.summary import torchrun_report
from ncclcheck.collectors.launch import torchrun_log
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.ranks import span
from ncclcheck.model.smoke import Fingerprint, Hang, RankProgress, RankState, Timing


def fp(rank: int, host: str = "a", nccl: str | None = "2.21.5", **env: str) -> Fingerprint:
    return Fingerprint(rank, host, "2.5.1", nccl, "nccl", "eth0(10.0.0.1)", (), tuple(sorted(env.items())))


def progress(rank: int, last_time: float = 0.0, timings: tuple[Timing, ...] = ()) -> RankProgress:
    return RankProgress(
        rank, 100 + rank, "a", "start", "all_reduce", 8, "all_reduce", last_time, False, (), 2, rank, timings
    )


def test_identical_ranks_have_no_differences() -> None:
    assert differences([fp(0, NCCL_IB_HCA="mlx5"), fp(1, NCCL_IB_HCA="mlx5")]) == ()


def test_nccl_version_difference_names_the_odd_rank() -> None:
    (finding,) = differences([fp(0), fp(1), fp(2, nccl="2.18.1"), fp(3)])
    assert finding.id == "fingerprint-nccl" and finding.ranks == (2,) and "2.18.1 on rank(s) 2" in finding.message


def test_env_differences_per_node_names_are_info_but_other_settings_warn() -> None:
    prints = [fp(0, "a", NCCL_SOCKET_IFNAME="eth0"), fp(1, "b", NCCL_SOCKET_IFNAME="ens1")]
    assert [(f.severity, f.ranks) for f in differences(prints)] == [("info", (1,))]
    prints = [fp(0, "a"), fp(1, "a"), fp(2, "b", NCCL_P2P_DISABLE="1")]
    (finding,) = differences(prints)
    assert finding.severity == "warning" and finding.ranks == (2,) and "NCCL_P2P_DISABLE" in finding.message


def test_interface_names_differing_on_one_host_warn() -> None:
    other = Fingerprint(1, "a", "2.5.1", "2.21.5", "nccl", "docker0(172.17.0.1)", (), ())
    (finding,) = differences([fp(0), other])
    assert finding.id == "fingerprint-interface" and finding.ranks == (1,)


def test_span_compacts_rank_lists() -> None:
    assert span([6, 0, 1, 2, 3, 9, 10]) == "0-3,6,9-10"


def test_a_heartbeat_keeps_a_long_step_alive() -> None:
    ranks = [progress(0, last_time=100.0), progress(1, last_time=100.0)]
    assert stalled_ranks(ranks, {0: 139.0}, now=140.0, timeout_s=30.0) == (1,)
    assert stalled_ranks(ranks, {0: 139.0, 1: 135.0}, now=140.0, timeout_s=30.0) == ()


def test_local_results_take_the_slowest_rank_per_iteration_and_sum_wrong() -> None:
    t0 = Timing("all_reduce", 1000, 250, (10.0, 30.0, 20.0), 0)
    t1 = Timing("all_reduce", 1000, 250, (20.0, 10.0, 40.0), 3)
    (result,) = local_results([progress(0, timings=(t0,)), progress(1, timings=(t1,))], world_size=4)
    assert result.time_us_p50 == 30.0 and result.time_us_p95 == 40.0 and result.wrong == 3
    assert result.time_us_min == 20.0  # per-iteration max over ranks (20, 30, 40): the fastest of them
    assert result.status == "wrong" and result.busbw_gbps == result.algbw_gbps * 1.5  # 2(n-1)/n at n=4


def test_merge_adds_the_other_nodes_ranks_and_culprits() -> None:
    local = Hang("all_reduce", 8, (), (RankState(0, "in_collective", "all_reduce", "a.py:1", ()),), "")
    remote = Hang("all_reduce", 8, (1,), (RankState(1, "not_in_collective", None, "b.py:9 (load)", ()),), "")
    merged = merge(local, [remote], world_size=3)
    assert merged.culprits == (1,) and [s.rank for s in merged.ranks] == [0, 1]
    assert "rank 1 is not in all_reduce" in merged.message and "rank(s) 2 live on other nodes" in merged.message


def failed(rank: int, error_time: float | None) -> RankProgress:
    return dataclasses.replace(progress(rank), error="RuntimeError: x" if error_time else None, error_time=error_time)


def died(rank: int, code: int, root: bool = False) -> ChildFailure:
    return ChildFailure(rank, rank, "a", code, signal_of(code), root)


def test_first_failure_is_the_earliest_python_error_not_the_lowest_rank() -> None:
    ranks = [failed(0, 10.5), failed(1, 10.2), failed(2, 10.9)]
    assert first_failure(ranks, [died(0, 1, root=True), died(1, 1), died(2, 1)]) == 1


def test_first_failure_puts_a_crash_signal_before_its_peers_errors_but_not_sigterm() -> None:
    ranks = [failed(0, 10.0), failed(1, None), failed(2, None)]
    # rank 2 was stopped by torchrun (SIGTERM) after rank 1 was SIGKILLed; rank 0 raised as an echo.
    assert first_failure(ranks, [died(0, 1, root=True), died(1, -9), died(2, -15)]) == 1
    assert first_failure(ranks, [died(0, 1), died(1, -15, root=True), died(2, -15)]) == 0
    # rank 0 died of SIGABRT after its own error (torch's watchdog): an echo, not a crash signal.
    assert first_failure([failed(0, None), failed(1, 9.0)], [died(0, -6, root=True), died(1, 1)]) == 1


def test_first_failure_falls_back_to_torchrun_then_to_an_unfinished_rank() -> None:
    ranks = [failed(0, None), dataclasses.replace(failed(1, None), ended=True)]
    assert first_failure(ranks, [died(1, -15, root=True)]) == 1
    assert first_failure(ranks, []) == 0


def test_death_hints() -> None:
    assert "OOM killer" in hint("SIGKILL") and "/dev/shm" in hint("SIGBUS") and "native code" in hint("SIGFPE")
    assert "watchdog" in hint("SIGABRT") and hint(None) == ""
    assert signal_of(-9) == "SIGKILL" and signal_of(1) is None and signal_of(-200) is None


# The error summary a real torchrun 2.13 printed when rank 1 of 3 SIGKILLed itself.
TORCHRUN_SUMMARY = """\
Failures:
[1]:
  time      : 2026-11-21_08:20:42
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 24369)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 24369
[2]:
  time      : 2026-11-21_08:20:42
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 24371)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 24371
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_08:20:42
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 24370)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 24370
=======================================================
"""


def test_torchrun_failures_are_read_per_rank(tmp_path: Path) -> None:
    (tmp_path / "torchrun.log").write_text("W1121 worker log line rank: 7\n" + TORCHRUN_SUMMARY)
    assert torchrun_report(torchrun_log(str(tmp_path))).failures == (
        ChildFailure(0, 0, "localhost", -15, "SIGTERM", False, "2026-11-21_08:20:42", 0, 24369),
        ChildFailure(2, 2, "localhost", -15, "SIGTERM", False, "2026-11-21_08:20:42", 0, 24371),
        ChildFailure(1, 1, "localhost", -9, "SIGKILL", True, "2026-11-21_08:20:42", 0, 24370),
    )
    assert torchrun_log(str(tmp_path / "absent")) == []


def test_rank_died_says_how_where_and_what() -> None:
    raised = dataclasses.replace(failed(2, 10.0), error="RuntimeError: boom")
    finding = rank_died(2, died(2, 1), raised, "", "/logs/2/stderr.log")
    assert finding.message == "rank 2 died (exit code 1) during all_reduce: RuntimeError: boom"
    assert finding.fix.startswith("read that rank's stderr (/logs/2/stderr.log)") and finding.ranks == (2,)
    finding = rank_died(1, died(1, -9), failed(1, None), "last words", None)
    assert finding.message == "rank 1 died (signal SIGKILL) during all_reduce; last output: last words"
    assert "OOM killer" in finding.fix and "in the log dir" in finding.fix


def test_a_taken_store_port_in_torchruns_log_is_why_the_ranks_never_started() -> None:
    from ncclcheck.analysis.smoke.summary import never_started
    from ncclcheck.model.smoke import Launch

    log = FIXTURES / "torchrun" / "store_port_in_use.log"
    report = torchrun_report(log.read_text().splitlines())
    assert report.root_cause is not None and report.root_cause.id == "store-port-in-use"
    launch = Launch(1, 1, 0, None, 29655, "gloo", "/tmp/run", ())
    finding = never_started(launch, 1, report)
    assert "never started (torchrun exit code 1): the store/rendezvous port 29655 is already taken" in finding.message
    quiet = never_started(launch, None, torchrun_report([]))  # nothing in the log: no port, no rendezvous blamed
    assert "no rank reported before the deadline" in quiet.message and "rendezvous" not in quiet.message


@pytest.mark.parametrize(
    ("text", "named", "not_named"),
    [
        ("hang@1:allreduce", "unknown op allreduce; choose from " + ", ".join(OPS), "KIND"),
        ("explode@1:all_reduce", "unknown kind explode; choose from hang, crash, kill, mismatch", "op"),
        ("hang@one:all_reduce", "expected KIND@RANK:OP", "unknown"),
    ],
)
def test_a_bad_drill_names_the_part_that_is_wrong(text: str, named: str, not_named: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_drill(text)
    assert named in str(caught.value) and not_named not in str(caught.value).split(":", 1)[1], caught.value


def test_a_good_drill_parses() -> None:
    assert parse_drill(" mismatch@1:all_gather ") == Drill("mismatch", 1, "all_gather")


def test_merge_never_blames_ranks_waiting_in_their_step_whatever_their_stack_says() -> None:
    """Two nodes in init: node 0's ranks wait in init_process_group (or in the fingerprints' all_gather_object),
    node 1's rank 3 died there. Only rank 3 is to blame: the waiting ranks' stacks name torch's functions, not the
    step "init" (the merge once compared the two and blamed every waiting rank). A remote rank inside another step
    than ours is the odd one (must fire)."""
    waiting = tuple(
        RankState(r, "in_collective", name, "worker.py:219", ())
        for r, name in ((0, "init_process_group"), (1, "init_process_group"), (2, "all_gather_object"))
    )
    local = Hang("init", 0, (), waiting, "")
    dead = Hang("init", 0, (3,), (RankState(3, "dead", None, None, ()),), "")
    merged = merge(local, [dead], world_size=4)
    assert merged.culprits == (3,) and "rank 3 has exited" in merged.message
    assert "rank(s) 0,1,2 wait in init" in merged.message
    elsewhere = Hang("all_gather", 8, (), (RankState(3, "in_collective", "all_gather", "w.py:3", ()),), "")
    odd = merge(local, [elsewhere], world_size=4)
    assert odd.culprits == (3,) and "rank 3 called all_gather instead" in odd.message
