"""What one member of a ``smoke --isolate`` stage posts: its smoke's exit, busbw and why it failed."""

from __future__ import annotations

from ncclcheck.commands.smoke.isolate import _outcome

# The finding the smoke wrote for a rank whose GLOO_SOCKET_IFNAME names a NIC the node lacks (the test hosts'
# run, shortened in the middle): the error that says why is at the end of the rank's last output.
DIED = (
    "rank 0 died (exit code 1) during init; last output: "
    + '  File "/x/torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper | ' * 4
    + "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84]"
    " ifa != nullptr. Unable to find address for: ib0"
)


def report(message: str) -> dict[str, object]:
    return {"scope": "node", "results": [], "findings": [{"severity": "error", "message": message}]}


def test_a_long_reason_keeps_what_failed_and_the_error_at_its_end() -> None:
    reason = _outcome(1, report(DIED))["reason"]
    assert reason.startswith("rank 0 died (exit code 1) during init")
    assert reason.endswith("Unable to find address for: ib0") and len(reason) < len(DIED)


def test_a_short_reason_is_whole_and_a_pass_has_none() -> None:
    assert _outcome(1, report("init hung"))["reason"] == "init hung"
    assert _outcome(0, report("init hung"))["reason"] == ""
    assert _outcome(3, None)["reason"] == "smoke exited 3 without a report"


def row(op: str, size: int, busbw: float, p50: float, best: float | None) -> dict[str, object]:
    return {"op": op, "bytes": size, "busbw_gbps": busbw, "time_us_p50": p50, "time_us_min": best}


def test_busbw_is_the_largest_size_s_at_its_fastest_iteration() -> None:
    # the CI-measured shape: a pair whose median iteration a busy node slowed (0.0245 GB/s against 0.26 before)
    rows = [row("send_recv", 1024, 9.0, 10.0, 10.0), row("send_recv", 262144, 0.0245, 10_700.0, 1_000.0)]
    busbw = _outcome(0, {"scope": "job", "results": rows, "findings": []})["busbw"]
    assert abs(busbw["send_recv"] - 0.0245 * 10.7) < 1e-9  # the 256K row, at its fastest iteration


def test_a_link_slow_on_every_iteration_stays_slow_and_an_old_report_is_read_at_its_median() -> None:
    slow = [row("all_reduce", 262144, 0.00095, 275_000.0, 270_000.0)]  # tbf at 8 mbit: every iteration slow
    assert _outcome(0, {"scope": "job", "results": slow, "findings": []})["busbw"]["all_reduce"] < 0.001
    old = [{"op": "all_reduce", "bytes": 8, "busbw_gbps": 0.5, "time_us_p50": 3.0}]  # before time_us_min
    assert _outcome(0, {"scope": "job", "results": old, "findings": []})["busbw"] == {"all_reduce": 0.5}
    assert _outcome(0, {"scope": "node", "results": old, "findings": []})["busbw"] == {}  # a node's own view


def test_gloo_send_recv_is_verified_but_its_busbw_not_judged_and_nccl_s_is() -> None:
    # measured on the test hosts: a healthy pair's gloo send_recv at its fastest iteration 3996 us for 256K
    rows = [row("send_recv", 262144, 0.06, 4100.0, 3996.0), row("all_gather", 262144, 0.3, 600.0, 500.0)]
    gloo = _outcome(0, {"scope": "job", "backend": "gloo", "results": rows, "findings": []})["busbw"]
    nccl = _outcome(0, {"scope": "job", "backend": "nccl", "results": rows, "findings": []})["busbw"]
    assert set(gloo) == {"all_gather"} and set(nccl) == {"send_recv", "all_gather"}


# A dropped link on the test hosts (CI's run): node 3's rank died connecting (its own fault, as far as it can
# tell), and node 0's rank died because node 3 (10.79.0.4) closed the connection, which gloo says in those words.
CONNECT = (
    "rank 3 died (exit code 1) during init; last output: RuntimeError:  rv != -1. -1 vs -1. connect: Invalid argument"
)
CLOSED = (
    "rank 0 died (exit code 1) during init; last output: [enforce fail at /third_party/gloo/gloo/transport/tcp/"
    "pair.cc:553] Connection closed by peer [10.79.0.4]:24766. This is typically caused by a remote worker crashing."
)


def test_a_member_its_peer_took_down_is_listed_after_the_one_that_failed_by_itself() -> None:
    from ncclcheck.commands.smoke.isolate import _later

    by_peer, itself = _outcome(1, report(CLOSED)), _outcome(1, report(CONNECT))
    assert by_peer["after_peer"] and not itself["after_peer"]
    ended = {**_outcome(143, report("ended")), "ended_by": 0}
    outcomes = {0: by_peer, 1: ended, 3: itself, 2: None}
    assert sorted(outcomes, key=lambda n: _later(outcomes[n])) == [3, 2, 0, 1]
    assert not _outcome(1, report(DIED))["after_peer"] and not _outcome(0, report(CLOSED))["after_peer"]
