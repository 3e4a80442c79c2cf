"""Damaged pastes: a progress bar drawn to the terminal's width is whole (nothing is glued to it), tmux's copy-mode
position drawn over a line's right end is taken off, and a rank that reported a timeout in a line read as no Timeout
(cut by a terminal, or torch 2.3-2.5's "Timeout at NCCL work") is never one that "did not report it".

The bars are tqdm's default format (``{l_bar}{bar}{r_bar}``: "desc:  45%|███▌  | 450/1000 [01:23<01:42,
5.37it/s, loss=2.31]", and "450it [01:23, 5.37it/s]" with no total), drawn to the width as tqdm draws them; the
position is tmux's window-copy.c format "[%u/%u]" and its search count "(%d results)"."""

from __future__ import annotations

import pytest

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport

WIDTHS = (80, 100, 120)
WATCHDOG = (
    "[rank{r}]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600015"
    " milliseconds before timing out."
)


def bar(width: int, total: bool = True) -> str:
    """A tqdm bar exactly ``width`` columns wide, as tqdm draws it on a terminal that wide."""
    left = "Epoch 3:  45%|" if total else "Epoch 3: "
    right = "| 450/1000 [01:23<01:42,  5.37it/s, loss=2.31]" if total else "450it [01:23,  5.37it/s, loss=2.31]"
    if not total:
        return (left + " " * width)[: width - len(right)] + right
    room = width - len(left) - len(right)
    return left + "█" * (room // 2) + "▌" + " " * (room - room // 2 - 1) + right


def texts(*lines: str) -> list[str]:
    return [line.text for line in frame_all(list(lines), "paste.log")]


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "paste.log"))


def timeout_finding(rep: LogReport) -> Finding:
    (found,) = [f for f in rep.findings if f.id == "collective-timeout"]
    return found


AFTER_A_BAR = [
    "what():  [enforce fail at pair.cc:446] op.preamble.length <= op.nbytes. 20 vs 16",
    "Killed",
    "sh: line 1: 4242 Killed                  python train.py",
    "killed by the OOM killer",
    "gloo lost its peer",
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("total", [True, False], ids=["total", "no-total"])
@pytest.mark.parametrize("after", AFTER_A_BAR)
def test_a_progress_bar_as_wide_as_the_terminal_takes_no_line(width: int, total: bool, after: str) -> None:
    line = bar(width, total)
    assert len(line) == width
    assert texts(line, after) == [line, after]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_line_of_the_same_width_that_is_no_bar_is_still_rejoined(width: int) -> None:
    """Must still fire: a real hard wrap at that width (a message cut mid-word) is glued back."""
    message = "RuntimeError: NCCL communicator was aborted on rank 1. Original reason for failure was: " + "x" * 200
    first, rest = message[:width], message[width:]
    assert texts(first, rest) == [message]


def test_a_failure_after_a_bar_reads_as_it_does_without_it() -> None:
    """The C++ abort after a bar: with the bar glued, "what():" no longer started a line of its own."""
    failure = [
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "  what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <="
        " op.nbytes. 16 vs 8. Received data size doesn't match expected size. Is there a distributed collective"
        " mismatch in your code?",
    ]
    plain = read("step 1 | loss 2.31", *failure)
    for width in WIDTHS:
        barred = read(bar(width), *failure)
        assert barred.root_cause is not None and plain.root_cause is not None
        assert (
            (barred.status, barred.root_cause.id)
            == (plain.status, plain.root_cause.id)
            == ("fail", "collective-mismatch")
        )


def test_a_healthy_job_full_of_bars_passes() -> None:
    rep = read(*(bar(w) for w in WIDTHS for _ in range(3)), "Training finished.")
    assert rep.status == "pass", rep.findings


POSITIONS = ["[451/1919]", "[0/88]", "(3 results) [451/1919]", "[451/1919] (12+ results)", "(timed out) [7/1919]"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("position", POSITIONS)
def test_tmux_s_position_at_the_right_edge_is_taken_off(width: int, position: str) -> None:
    line = "[rank1]: RuntimeError: NCCL error: unhandled system error"
    drawn = (line + " " * width)[: width - len(position)] + position  # drawn over what was there (the pane's end)
    kept = line[: width - len(position)].removeprefix("[rank1]: ")
    assert texts(drawn, "[rank0]: step 40") == [kept, "step 40"]
    assert kept.startswith("RuntimeError: NCCL error: unhandled system err")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_wrapped_line_tmux_drew_over_is_still_rejoined(width: int) -> None:
    """The position drawn over a line that reached the edge (a hard wrap): off, and the rest is still glued."""
    whole = WATCHDOG.format(r=1)
    first, rest = whole[: width - len("[451/1919]")], whole[width - len("[451/1919]") :]
    (text,) = texts(first + "[451/1919]", rest)
    assert "[451/1919]" not in text and text.endswith("ran for 600015 milliseconds before timing out.")
    found = timeout_finding(read(first + "[451/1919]", rest, WATCHDOG.format(r=0), "[rank2]: step 40"))
    assert found.culprits == (2,)


@pytest.mark.parametrize(
    "line",
    [
        "Loading checkpoint shards [3/8]",  # not at a terminal's width: the line's own words
        ("step 12 | loss 2.31" + " " * 80)[: 81 - len("[451/1919]")] + "[451/1919]",  # 81 wide: no pane edge here
    ],
)
def test_a_position_like_ending_elsewhere_is_kept(line: str) -> None:
    assert texts(line) == [line]


CUT = (
    "[rank1]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=7, OpType=ALLRED"
)
OLDER = (
    "[rank1]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 1] Timeout at NCCL work: 7,"
    " last enqueued NCCL work: 7, last completed NCCL work: 6."
)


@pytest.mark.parametrize("reported", [CUT, OLDER], ids=["cut", "torch-2.3-wording"])
def test_a_rank_that_reported_the_timeout_is_never_one_that_did_not(reported: str) -> None:
    found = timeout_finding(read(WATCHDOG.format(r=0), reported, "[rank2]: step 40 loss 1.02"))
    assert "reported by rank(s) 0-1" in found.message
    assert "rank(s) 2 did not report it" in found.message and "1-2 did not" not in found.message
    assert found.culprits == (2,)


def test_a_silent_rank_is_still_the_suspect() -> None:
    """Must still fire: the rank with only training lines, no timeout of its own, is the one to look at."""
    found = timeout_finding(read(WATCHDOG.format(r=0), WATCHDOG.format(r=1), "[rank2]: step 40 loss 1.02"))
    assert found.culprits == (2,) and "reported by rank(s) 0-1" in found.message


# A log cut inside its last NCCL header's level word: the header as NCCL prints it, cut after each letter.
HEALTHY_NCCL = [
    "node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "node1:4242:4242 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
]


@pytest.mark.parametrize(
    ("cut", "level"),
    [
        ("node1:4242:4242 [0] NCCL W", "WARN"),
        ("node1:4242:4242 [0] NCCL WA", "WARN"),
        ("node1:4242:4242 [0] NCCL WAR", "WARN"),
        ("[rank1]:node1:4243:4243 [1] NCCL WA", "WARN"),
        ("node1:4242:4250 [0] misc/socket.cc:50 NCCL WA", "WARN"),
        ("node1:4242:4242 [0] NCCL ABO", "ABORT"),
        ("node1:4242:4242 [0] NCCL A", "ABORT"),  # ABORT or ATTN: an error is not passed over
        ("[0] NCCL WA", "WARN"),
    ],
)
def test_a_log_cut_inside_a_warning_s_level_word_is_not_a_pass(cut: str, level: str) -> None:
    (line,) = frame_all([cut], "paste.log")
    assert line.level == level and line.text.startswith("NCCL "), line
    rep = read(*HEALTHY_NCCL, cut)
    assert rep.status != "pass" and [f.id for f in rep.findings] == ["unrecognised-error"], rep.findings
    assert rep.findings[0].evidence[0].line == 3


@pytest.mark.parametrize(
    "line",
    [
        "node1:4242:4242 [0] NCCL IN",  # INFO cut: says nothing
        "node1:4242:4242 [0] NCCL WAS",  # no level word
        "node1:4242:4242 [0] NCCL WAR tail",  # a cut word is the line's end, never followed by more
        "node1:4242:4242 [0] NCCL INFO NET/IB : No device found.",
        "Using NCCL A",
    ],
)
def test_must_not_a_healthy_log_whose_last_line_is_no_cut_warning_passes(line: str) -> None:
    rep = read(*HEALTHY_NCCL, line)
    assert rep.status == "pass", rep.findings
