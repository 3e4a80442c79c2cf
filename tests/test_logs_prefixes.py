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
