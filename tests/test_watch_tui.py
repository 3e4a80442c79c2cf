"""The watch app driven by its Pilot, fed by a scripted data source on a fixed clock; and SVG snapshots."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rich.text import Text
from watch_states import all_in, job, sample, stack, states

from ncclcheck.model.watch import WatchState
from ncclcheck.tui.app import RankTable, WatchApp

MISMATCH = states(job(4), *[all_in(4, "all_reduce", r2=sample(2, stack("all_gather", 57)))] * 4)
HEALTHY = states(job(4), *[{r: sample(r, stack(None, 80 + i, "forward")) for r in range(4)} for i in range(3)])


class Scripted:
    """Hands out the scripted states in order, then keeps repeating the last; ``hold`` stops at the first."""

    def __init__(self, *script: WatchState) -> None:
        self.script, self.polls, self.hold = list(script), 0, False

    def poll(self) -> WatchState:
        state = self.script[0 if self.hold else min(self.polls, len(self.script) - 1)]
        self.polls += 1
        return state


def app(source: Scripted, tmp_path: Path | None = None) -> WatchApp:
    return WatchApp(source, 0.05, clock=lambda: 100.0, save_dir=tmp_path)


async def until(pilot: object, check: object) -> None:
    for _ in range(200):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the app never got there")


def rows(a: WatchApp) -> list[list[str]]:
    table = a.query_one(RankTable)
    return [[c.plain if isinstance(c, Text) else str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_rows_findings_and_flagged_row() -> None:
    asyncio.run(_rows_findings_and_flagged_row())


async def _rows_findings_and_flagged_row() -> None:
    a = app(Scripted(MISMATCH))
    async with a.run_test(size=(150, 32)) as pilot:
        await until(pilot, lambda: a.shown is not None)
        assert [r[1] for r in rows(a)] == ["0", "1", "2", "3"]
        assert rows(a)[2][6] == "all_gather" and rows(a)[0][6] == "all_reduce"
        table = a.query_one(RankTable)
        assert table.get_row_at(2)[1].style == "bold red" and table.get_row_at(0)[1].style == ""
        findings = a.query_one("#findings").render()
        assert "mismatch" in str(findings) and "rank 2 waits in all_gather at train.py:57" in str(findings)


def test_keys_flagged_sort_pause_stack_save(tmp_path: Path) -> None:
    asyncio.run(_keys_flagged_sort_pause_stack_save(tmp_path))


async def _keys_flagged_sort_pause_stack_save(tmp_path: Path) -> None:
    source = Scripted(MISMATCH, HEALTHY)
    source.hold = True
    a = app(source, tmp_path)
    async with a.run_test(size=(150, 40)) as pilot:
        await until(pilot, lambda: a.shown is not None)
        await pilot.press("f")
        assert [r[1] for r in rows(a)] == ["2"]
        await pilot.press("f", "s")
        assert a.sort_by == "time in state"
        await pilot.press("p")
        source.hold = False  # the source moves on; the frozen view must not
        await until(pilot, lambda: a.state is HEALTHY)
        assert a.shown is MISMATCH and "PAUSED" in str(a.query_one("#job").render())
        await pilot.press("p")
        assert a.shown is HEALTHY and "no problem seen" in str(a.query_one("#findings").render())
        await pilot.press("enter")
        assert a.query_one("#stack").has_class("open")
        assert "forward  /job/train.py" in str(a.query_one("#stack").render())
        await pilot.press("d")
        saved = json.loads(next(tmp_path.glob("ncclcheck-watch-*.json")).read_text())
        assert saved["schema"] == "ncclcheck.watch/1" and len(saved["ranks"]) == 4


def test_rows_off_screen_are_current_once_scrolled_to() -> None:
    asyncio.run(_rows_off_screen_are_current_once_scrolled_to())


async def _rows_off_screen_are_current_once_scrolled_to() -> None:
    """500 ranks, a screen of about 20 rows: rank 450 changes state while far below the screen; with the view
    paused, moving the cursor down to it shows the new state, not the old one."""
    before = states(job(500), all_in(500, "all_reduce"))
    after = states(
        job(500), all_in(500, "all_reduce"), all_in(500, "all_reduce", r450=sample(450, stack("barrier", 60)))
    )
    source = Scripted(before, after)
    source.hold = True
    a = app(source)
    async with a.run_test(size=(150, 30)) as pilot:
        await until(pilot, lambda: a.shown is before)
        table = a.query_one(RankTable)
        assert table.row_count == 500 and rows(a)[0][6] == "all_reduce"
        source.hold = False
        await until(pilot, lambda: a.shown is after)
        assert rows(a)[1][8] == "5s"  # on screen: updated at once
        await pilot.press("p")  # paused: only scrolling can bring the rows below up to date now
        table.move_cursor(row=450)
        await pilot.pause()
        assert table.scroll_y > 400
        assert rows(a)[450][6] == "barrier" and rows(a)[450][8] == "0s"
        assert rows(a)[449][8] == "5s" and rows(a)[455][8] == "5s"


def test_snapshot_mismatch(snap_compare: object) -> None:
    async def first_sample(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)

    a = app(Scripted(MISMATCH))
    assert snap_compare(a, terminal_size=(150, 30), run_before=first_sample)  # type: ignore[operator]


def test_snapshot_healthy_with_stack(snap_compare: object) -> None:
    async def open_stack(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)
        await pilot.press("down", "enter")  # type: ignore[attr-defined]

    a = app(Scripted(HEALTHY))
    assert snap_compare(a, terminal_size=(150, 30), run_before=open_stack)  # type: ignore[operator]
