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
