"""The text view of ``watch --once`` (no terminal): the blamed and the undecided ranks carry their own glyph."""

from __future__ import annotations

import io

from rich.console import Console
from watch_states import all_in, job, sample, stack, states

from ncclcheck.views.watch import CULPRIT, UNDECIDED, render


def rendered(state: object) -> list[str]:
    out = io.StringIO()
    render(state, Console(file=out, width=140, color_system=None))  # type: ignore[arg-type]
    return out.getvalue().splitlines()


def row(lines: list[str], rank: int) -> str:
    return next(line for line in lines if line.startswith("│") and line.split("│")[2].strip() == str(rank))


def test_the_blamed_rank_has_its_glyph_without_colour() -> None:
    state = states(job(3), *[all_in(3, "all_reduce", r1=sample(1, stack("broadcast", 57)))] * 4)
    lines = rendered(state)
    assert CULPRIT in row(lines, 1)
    assert CULPRIT not in row(lines, 0) and CULPRIT not in row(lines, 2)
    assert any("the rank(s) to blame" in line for line in lines)


def test_a_tie_marks_both_sides_undecided() -> None:
    state = states(job(2), *[all_in(2, "all_reduce", r1=sample(1, stack("broadcast", 57)))] * 4)
    lines = rendered(state)
    assert UNDECIDED in row(lines, 0) and UNDECIDED in row(lines, 1)
    assert not any(CULPRIT in row(lines, r) for r in (0, 1))


def test_a_healthy_view_marks_nobody() -> None:
    moving = [all_in(2, "all_reduce", line=80 + i, r1=sample(1, stack(None, 60 + i))) for i in range(4)]
    lines = rendered(states(job(2), *moving, every=1.0))
    assert not any(CULPRIT in row(lines, r) or UNDECIDED in row(lines, r) for r in (0, 1))
    assert not any("the rank(s) to blame" in line for line in lines)


def test_for_says_at_least_for_a_rank_there_since_the_first_look() -> None:
    """``for`` counts from watch's first look: a rank standing there since then has stood there at least that long
    ("≥"); one that arrived while watched shows its own time, without the sign."""
    moved = all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))
    state = states(job(2), moved, moved, all_in(2, "all_reduce"), all_in(2, "all_reduce"))
    lines = rendered(state)
    columns = [c.strip() for c in next(line for line in lines if "call site" in line).split("┃")]
    at = columns.index("for")
    assert row(lines, 0).split("│")[at].strip().startswith("≥")
    assert not row(lines, 1).split("│")[at].strip().startswith("≥")
