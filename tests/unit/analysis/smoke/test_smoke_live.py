"""smoke's progress while it runs: which rank stands still, where, and for how long of ``--timeout`` — on the live
line, in the lines written without a terminal, and on top of ``smoke --tui`` (the newcomer's issue 24, point 6)."""

from __future__ import annotations

import io

from ncclcheck.analysis.smoke.progress import INIT_GRACE_S, smoke_verdict, standing_still
from ncclcheck.commands.smoke.supervise import Shown
from ncclcheck.model.smoke import OpResult, RankProgress
from ncclcheck.model.watch import Verdict
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke import status_line

T0 = 1_000.0
MIB = 1 << 20
DONE = (OpResult("reduce", MIB, MIB // 4, "ok", 812.0, 900.0, 1.3, 1.3, 0),)


def rank(n: int, event: str, op: str | None, size: int = 0, at: float = T0, ended: bool = False) -> RankProgress:
    return RankProgress(n, 100 + n, "node0", event, op, size, op if event == "start" else None, at, ended, ())


def held_by_the_drill() -> tuple[RankProgress, ...]:
    """``--drill hang@1:all_reduce``: rank 1 sits in the drill, ranks 0 and 2 wait in all_reduce for it."""
    return (rank(0, "start", "all_reduce", 8), rank(1, "drill", "all_reduce"), rank(2, "start", "all_reduce", 8))


def test_the_live_line_names_the_rank_standing_still_and_counts_up_to_the_timeout() -> None:
    beats = {0: T0 - 0.1, 1: T0 - 0.1, 2: T0 - 0.1}  # the last finished iterations were just before the steps
    line = status_line(DONE, standing_still(held_by_the_drill(), beats, T0 + 4.2, 6.0)).plain
    assert line.startswith("1 result(s); last: reduce 1M 812.0 us; ")
    assert "rank 1 standing still 4 s of 6 s held by a drill before all_reduce" in line, line
    assert "rank 0,2 standing still 4 s of 6 s in all_reduce 8B" in line, line


def test_a_rank_that_moves_or_ended_is_not_standing_still() -> None:
    ranks = (rank(0, "start", "all_reduce", MIB), rank(1, "done", "broadcast", MIB), rank(2, "end", None, ended=True))
    beats = {0: T0 + 2.9}  # rank 0 finishes iterations: its heartbeat is fresh
    still = standing_still(ranks, beats, T0 + 3.0, 30.0)
    assert [(s.ranks, s.place, round(s.still_s)) for s in still] == [((1,), "after broadcast 1M", 3)]
    assert standing_still(ranks, {0: T0 + 2.9, 1: T0 + 2.5}, T0 + 3.0, 30.0) == ()


def test_init_counts_against_the_timeout_and_its_grace() -> None:
    still = standing_still((rank(0, "start", "init"),), {}, T0 + 12.0, 6.0)
    assert still[0].text() == f"rank 0 standing still 12 s of {6 + INIT_GRACE_S:g} s in init"
    assert status_line((), still).plain == f"starting the ranks ...; {still[0].text()}"


def test_without_a_terminal_a_line_says_who_stands_still_now_and_then() -> None:
    out = io.StringIO()
    shown = Shown(make_console(out), still_every_s=2.0)
    for seconds in (0.5, 1.0, 1.5, 2.1, 3.0, 4.3, 5.0):
        shown.update(DONE, standing_still(held_by_the_drill(), {}, T0 + seconds, 6.0))
    lines = [line for line in out.getvalue().splitlines() if "standing still" in line]
    assert len(lines) == 2, lines  # at 2 s and at 4 s of 6, not at every poll
    assert "rank 1 standing still 2 s of 6 s held by a drill before all_reduce" in lines[0]
    assert "rank 1 standing still 4 s of 6 s" in lines[1]
    shown.update(DONE, ())  # progress again: the count starts over
    shown.update(DONE, standing_still(held_by_the_drill(), {}, T0 + 2.0, 6.0))
    lines = [line for line in out.getvalue().splitlines() if "standing still" in line]
    assert len(lines) == 3 and "rank 1 standing still 2 s of 6 s" in lines[2], lines


def test_smoke_tui_never_says_moving_while_a_rank_stands_still() -> None:
    moving = Verdict("ok", "✓ no problem seen in 12 s: every rank is moving")
    moved = Verdict("pending", "… watching: every rank moved at the last sample")
    held = standing_still(held_by_the_drill(), {}, T0 + 0.4, 6.0)  # the drill holds rank 1 from its first moment
    assert [s.ranks for s in held] == [(1,)]
    for verdict in (moving, moved):
        shown = smoke_verdict(verdict, held)
        assert shown.status == "pending" and "✓" not in shown.message and "moving" not in shown.message
        assert "rank 1 standing still 0 s of 6 s held by a drill before all_reduce" in shown.message
    assert smoke_verdict(moving, ()) == moving  # nobody stands still: the watch view's own line
    problem = Verdict("problem", "✗ straggler: see the findings")
    assert smoke_verdict(problem, held) == problem  # a finding says more than a count


def test_finished_ops_print_before_the_watchdog_and_once() -> None:
    """The watchdog's line comes after the ops that finished (supervise calls finish() before the dumps), and the
    closing finish() prints none of them again."""
    out = io.StringIO()
    console = make_console(out)
    shown = Shown(console, still_every_s=2.0)
    two = (*DONE, OpResult("all_reduce", 8, 2, "ok", 10.0, 11.0, 0.1, 0.1, 0))
    shown.update(two)
    shown.finish()
    console.print("watchdog: no progress past the deadline")
    shown.finish()
    text = out.getvalue()
    assert text.index("reduce") < text.index("all_reduce") < text.index("watchdog"), text
    assert text.count("all_reduce") == 1 and text.rstrip().endswith("deadline"), text
