"""Cuts at no terminal's width: a paste cut mid-token inside parentheses (M14, at 209 and 192 columns) is glued back
when the next line closes what the cut left open; a glog header a wrap left alone goes on with the next line. Real
lines only: M14's own, and its lines put after one another where they must not be glued."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all

(M14,) = (FIXTURES / "nccl_logs_more").glob("M14_*.log")
LINES = M14.read_text().splitlines()
(F42,) = (FIXTURES / "nccl_logs").glob("42_*.log")


def test_a_cut_inside_parentheses_is_glued_back() -> None:
    framed = {x.line: x.text for x in frame_all(LINES, "m14")}
    assert 3 not in framed and 7 not in framed
    assert "WorkNCCL(SeqNum=1522789, OpType=_ALLGATHER_BASE" in framed[2]
    assert "/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)" in framed[6]


def test_the_glued_timeout_is_read_with_its_group() -> None:
    (t,) = analyse(frame_all(LINES, "m14")).timeouts
    assert (t.seq, t.op, t.pg, t.group_rank, t.rank) == (1522789, "_ALLGATHER_BASE", "2", 0, 0)


def test_a_line_that_closes_nothing_is_not_glued() -> None:
    """The cut head followed by lines that do not continue it: balanced parentheses, an NCCL header."""
    head = LINES[1]
    for after in (LINES[3], "gpu-node07:48211:48390 [2] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"):
        framed = [x.line for x in frame_all([head, after], "m14")]
        assert framed == [1, 2], after


def test_a_glog_header_left_alone_by_a_wrap_goes_on() -> None:
    """Fixture 42 behind pdsh's prefix, wrapped at 80 columns: a cut right after "ProcessGroupNCCL.cpp:1664] " leaves
    "[PG 1 Rank 3] Exception ..." on the next line, which is its message, not a line of its own."""
    wrapped = [piece for line in F42.read_text().splitlines() for piece in _wrap("gpu-node-3: " + line, 80)]
    texts = [x.text for x in frame_all(wrapped, "42")]
    assert any(
        t.startswith("[E321 02:07:08.465224069 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception") for t in texts
    )


def _wrap(line: str, width: int) -> list[str]:
    """What a terminal of this width shows of a line: the wrapper around real lines."""
    return [line[i : i + width] for i in range(0, len(line), width)]
