"""env.timeouts: where one timeout fires before another it depends on, over hand-built environments.

Where each default comes from (read in the sources, not guessed):
- process-group timeout 10 min: ``kProcessGroupNCCLDefaultTimeout = std::chrono::milliseconds(10 * 60 * 1000)``
  in pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp;
- heartbeat 480 s: ``getCvarInt(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, 60 * 8 /*8 Mins*/)`` in the HeartbeatMonitor
  constructor, ProcessGroupNCCL.cpp (lowered from 10 min in pytorch#133028 to stop racing the NCCL timeout);
- dump wait 15 s: ``getCvarInt(TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, 15 * 1000 /*15 Sec*/)``, same constructor; the
  watchdog sleeps ``getDumpTimeout() * 4`` before ``handleException`` (Watchdog::runLoop), and the monitor sleeps
  ``heartbeatTimeoutInSec_`` after dumping, then ``terminateProcess`` (LOG(FATAL): SIGABRT);
- ``NCCL_PARAM(IbTimeout, "IB_TIMEOUT", 20)`` and ``NCCL_PARAM(IbRetryCnt, "IB_RETRY_CNT", 7)`` in NVIDIA/nccl
  src/transport/net_ib/connect.cc; the QP's local ACK timeout is 4.096 us x 2^timeout, retried retry_cnt times.
"""

from __future__ import annotations

import pytest
from snapshots import bare, check

from ncclcheck.analysis.env.timeouts import read_timeouts
from ncclcheck.model.checks import Status


def test_defaults_fit_together_and_say_where_each_value_comes_from() -> None:
    result = check(bare({}), "env.timeouts")
    assert result.status is Status.OK, result
    text = "\n".join(result.details)
    assert "600 s assumed" in text and "480 s (default 480)" in text and "4 x 15 s (default 15000)" in text
    assert "~34 s (default 20, default 7)" in text  # 4.096 us x 2^20 x 8 = 34.4 s


def test_healthy_settings_people_use_make_no_finding() -> None:
    env = {
        "NCCL_IB_TIMEOUT": "22",
        "NCCL_IB_RETRY_CNT": "7",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "60000",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }
    assert check(bare(env), "env.timeouts").status is Status.OK


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"NCCL_IB_TIMEOUT": "25"}, "a dead InfiniBand link is reported after ~1100 s"),
        ({"NCCL_IB_TIMEOUT": "23", "NCCL_IB_RETRY_CNT": "31"}, "the watchdog fires first"),
        ({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "1800"}, "is not below PyTorch's default 600 s"),
        ({"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "150000"}, "the timeout error is never raised"),
        ({"TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC": "60000", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "200"}, "4 x 60 s"),
    ],
)
def test_a_timeout_that_fires_before_the_one_it_depends_on_is_said_with_the_fix(
    env: dict[str, str], words: str
) -> None:
    result = check(bare(env), "env.timeouts")
    assert result.status is Status.WARN, result
    assert words in result.summary + "\n".join(result.details)
    assert result.fix


def test_the_new_flight_recorder_name_wins_over_the_old_one() -> None:
    env = {"TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC": "10000", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "900000"}
    times = read_timeouts(env)
    assert times.dump_wait_s == 10.0 and check(bare(env), "env.timeouts").status is Status.OK


def test_values_are_read_as_their_readers_read_them() -> None:
    """NCCL's strtoll reads "lots" as 0, and an IB timeout of 0 waits forever; PyTorch's getCvarInt keeps its default
    for what it cannot parse (env.vars says what is wrong with both)."""
    times = read_timeouts({"NCCL_IB_TIMEOUT": "lots", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "soon"})
    assert times.heartbeat_s == 480
    result = check(bare({"NCCL_IB_TIMEOUT": "0"}), "env.timeouts")
    assert result.status is Status.WARN and "is reported never" in result.summary
