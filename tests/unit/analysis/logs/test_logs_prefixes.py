"""Lines as launchers and collectors hand them over: each prefix is taken off, so the line underneath is read."""

from __future__ import annotations

import pytest

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame, frame_all

MSG = "Call to connect returned Connection refused, retrying"
NCCL = f"node3:999:999 [2] NCCL WARN {MSG}"


@pytest.mark.parametrize(
    ("line", "text", "rank"),
    [
        (f"node3: {NCCL}", MSG, None),  # pdsh -w node[1-4], clush -w
        (f"gpu-a100-07.cluster: {NCCL}", MSG, None),
        (f"3: [rank3]: {NCCL}", MSG, 3),  # srun --label, then torchrun's own
        (f"[pod/trainer-0/pytorch] {NCCL}", MSG, None),  # kubectl logs --prefix
        (f"trainer-1  | [rank1]: {NCCL}", MSG, 1),  # docker compose
        (f"Nov 21 10:00:01 node3 python3[4242]: {NCCL}", MSG, None),  # syslog / journald
        (f"trainer-0 pytorch {NCCL}", MSG, None),  # stern: pod and container
        (f"ml-team trainer-worker-3 pytorch [rank3]:{NCCL}", MSG, 3),  # stern -A: namespace first
    ],
)
def test_each_prefix_is_taken_off(line: str, text: str, rank: int | None) -> None:
    framed = frame(line, "x.log", 1)
    assert (framed.text, framed.host, framed.dev, framed.level, framed.rank) == (text, "node3", 2, "WARN", rank)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: an illegal memory access",
        "ERROR: the loader died",
        "Traceback (most recent call last):",
        "the model says Traceback is fine",  # prose: no Kubernetes name (digit or dash) before it
        "we saw the node1:1:2 [0] NCCL INFO retrying",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
    ],
)
def test_an_error_line_is_never_taken_for_a_prefix(line: str) -> None:
    assert frame(line, "x.log", 1).text == line


def test_pdsh_prefixed_nccl_lines_name_their_ranks() -> None:
    lines = [
        "node3: node3:999:999 [2] NCCL INFO ncclCommInitRank comm 0x5581 rank 10 nranks 16 cudaDev 2 nvmlDev 2"
        " busId 41000 commId 0x1f - Init COMPLETE",
        "node3: node3:999:1010 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer"
        " 10.0.0.5<46202> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3",
    ]
    report = analyse(frame_all(lines, "pdsh.log"))
    (found,) = [f for f in report.findings if f.id == "ib-retry-exceeded"]
    assert found.ranks == (10,)


def test_stern_lines_of_a_torch_timeout_are_read_as_the_rank_wrote_them() -> None:
    timeout = (
        "[rank1]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation"
        " timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600015"
        " milliseconds before timing out."
    )
    lines = [f"trainer-{r} pytorch {timeout.replace('1', str(r), 1)}" for r in (0, 1)]
    lines.append("trainer-2 pytorch [rank2]:step 40 loss 1.02")
    report = analyse(frame_all(lines, "stern.log"))
    (found,) = [f for f in report.findings if f.id == "collective-timeout"]
    assert found.culprits == (2,), found  # rank 2 logs but did not report the timeout


@pytest.mark.parametrize("width", [80, 120, 240])
def test_a_prefixed_line_after_one_at_a_terminal_width_is_a_line_of_its_own(width: int) -> None:
    """A launcher prefixes each line a rank hands it; a terminal's wrap leaves the rest unprefixed."""
    head = "[rank0]:RuntimeError: NCCL communicator was aborted on rank 0. "
    first = head + "x" * (width - len(head))
    assert len(first) == width
    lines = [first, "[rank1]:step 40 loss 1.02", "trainer-1 pytorch [rank1]:step 41 loss 1.01"]
    texts = [line.text for line in frame_all(lines, "x.log")]
    assert texts == [first[len("[rank0]:") :], "step 40 loss 1.02", "step 41 loss 1.01"]
    rest = [first, "xxxx and the rest of the message"]  # no prefix: the rest of a wrapped line
    assert [line.text for line in frame_all(rest, "x.log")] == [first[len("[rank0]:") :] + rest[1]]
