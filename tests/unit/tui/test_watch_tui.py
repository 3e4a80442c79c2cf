"""The watch app driven by its Pilot, fed by a scripted data source on a fixed clock; and SVG snapshots."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path

from rich.text import Text
from watch_states import all_in, job, sample, stack, states

from ncclcheck.model.findings import Finding
from ncclcheck.model.shares import Place, RankShare, Round
from ncclcheck.model.watch import Job, WatchState
from ncclcheck.sources.live import samples
from ncclcheck.tui.app import WatchApp
from ncclcheck.tui.widgets import COLUMNS, JobPicker, RankTable
from ncclcheck.views.shares import Pair, comparison, slow_pair, typical

MISMATCH = states(job(4), *[all_in(4, "all_reduce", r2=sample(2, stack("all_gather", 57)))] * 4)
TIE = states(job(2), *[all_in(2, "all_reduce", r1=sample(1, stack("broadcast", 60)))] * 4)
HEALTHY = states(job(4), *[{r: sample(r, stack(None, 80 + i, "forward")) for r in range(4)} for i in range(3)])
PTRACE = "py-spy may not read these processes (ptrace): run as root"


def timed(waits: list[float], cpu: list[float], rounds: int = 8) -> WatchState:
    """A job moving in user code, sampled every 5 s; each sample brings a round of 200 stacks per rank: the
    share ``waits[r]`` in all_reduce at train.py:83, the rest computing at train.py:32, its main thread busy
    ``cpu[r]`` of the round. Tracked and judged for real: the shares and the slow finding are the analysis's."""

    def round_of(r: int, i: int) -> Round:
        n = round(200 * waits[r])
        stacks = ((stack("all_reduce", 83, "train_step"), n), (stack(None, 32, "compute"), 200 - n))
        return Round(1000 + r, i * 5.0, i * 5.0 + 5.0, stacks, cpu[r] * 5.0)

    world = range(len(waits))
    samples = [
        {r: dataclasses.replace(sample(r, stack(None, 80 + i, "forward")), rounds=(round_of(r, i),)) for r in world}
        for i in range(rounds)
    ]
    return states(job(len(waits)), *samples)


SLOW = timed([0.63, 0.61, 0.02, 0.66], [0.37, 0.39, 0.98, 0.34])  # rank 2 computes 3x as long; rank 0 typical
BOUND = timed([0.70, 0.72, 0.69, 0.71], [0.3] * 4)  # every rank waits as much: communication-bound, info
BALANCED = timed([0.30, 0.31, 0.29, 0.30], [0.7] * 4)
COL = {name: i for i, name in enumerate(COLUMNS)}


class Scripted:
    """Hands out the scripted states in order, then keeps repeating the last; ``hold`` stops at the first.
    A state of None raises, as a failing poll would."""

    def __init__(self, *script: WatchState | None) -> None:
        self.script, self.polls, self.hold = list(script), 0, False

    def poll(self) -> WatchState:
        state = self.script[0 if self.hold else min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if state is None:
            raise OSError("/proc went away")
        return state


def app(source: Scripted, tmp_path: Path | None = None, clock: object = None) -> WatchApp:
    return WatchApp(source, 0.05, clock=clock or (lambda: 100.0), save_dir=tmp_path, samples=samples)  # type: ignore[arg-type]


async def until(pilot: object, check: object) -> None:
    for _ in range(300):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the app never got there")


def rows(a: WatchApp) -> list[list[str]]:
    table = a.query_one(RankTable)
    return [[c.plain if isinstance(c, Text) else str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def text_of(a: WatchApp, selector: str) -> str:
    return str(a.query_one(selector).render())


def run(coroutine: object) -> None:
    asyncio.run(coroutine)  # type: ignore[arg-type]


def test_rows_findings_and_the_blamed_row() -> None:
    async def go() -> None:
        a = app(Scripted(MISMATCH))
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert [r[COL["rank"]] for r in rows(a)] == ["0", "1", "2", "3"]
            assert rows(a)[2][COL["collective"]] == "all_gather" and rows(a)[0][COL["collective"]] == "all_reduce"
            assert [r[COL[""]] for r in rows(a)] == ["", "", "✗", ""]  # a glyph, not colour alone
            table = a.query_one(RankTable)
            assert table.get_row_at(2)[1].style == "bold red" and table.get_row_at(0)[1].style == ""
            findings = text_of(a, "#findings-text")
            assert "mismatch" in findings and "rank 2 waits in all_gather at train.py:57" in findings
            assert "✗ mismatch" in text_of(a, "#verdict")
            assert table.cursor_row == 2  # the cursor starts on the rank to blame

    run(go())


def test_a_tie_marks_both_sides_undecided_and_blames_neither() -> None:
    async def go() -> None:
        a = app(Scripted(TIE))
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert [r[COL[""]] for r in rows(a)] == ["?", "?"]
            assert a.query_one(RankTable).get_row_at(1)[1].style == "bold yellow"
            assert "cannot tell which side is wrong" in text_of(a, "#findings-text")

    run(go())


def test_notes_show_without_findings_and_the_verdict_is_never_a_bare_tick() -> None:
    pending = states(job(2), all_in(2, "all_reduce"), all_in(2, "all_reduce"), every=1.0)
    noted = dataclasses.replace(pending, notes=(PTRACE,))

    async def go() -> None:
        a = app(Scripted(noted))
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert not a.shown.findings and a.query_one("#findings").display
            assert PTRACE in text_of(a, "#findings-text")
            assert "watching" in text_of(a, "#verdict") and "✓" not in text_of(a, "#verdict")

    run(go())


def test_a_failing_poll_is_shown_and_polling_goes_on() -> None:
    async def go() -> None:
        source = Scripted(None, None, HEALTHY)
        a = app(source)
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is HEALTHY)
            assert source.polls >= 3 and a.is_running
            assert any("sampling failed: OSError: /proc went away" in str(n.message) for n in a._notifications)

    run(go())


def test_the_header_keeps_counting_while_a_poll_hangs() -> None:
    now = [100.0]

    async def go() -> None:
        source = Scripted(HEALTHY)
        a = app(source, clock=lambda: now[0])
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            source.hold = True
            a.source = None  # type: ignore[assignment]  # no more samples arrive: a hung poll
            await pilot.pause()
            now[0] = 107.0
            await until(pilot, lambda: "last sample 7s ago" in text_of(a, "#job"))

    run(go())


def test_keys_flagged_sort_pause_stack_save(tmp_path: Path) -> None:
    async def go() -> None:
        source = Scripted(MISMATCH, HEALTHY)
        source.hold = True
        a = app(source, tmp_path)
        async with a.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("f")
            assert [r[COL["rank"]] for r in rows(a)] == ["2"]
            await pilot.press("f", "s")
            assert a.sort_by == "time in state"
            await pilot.press("p")
            source.hold = False  # the source moves on; the frozen view must not
            await until(pilot, lambda: a.state is HEALTHY)
            assert a.shown is MISMATCH and "PAUSED" in text_of(a, "#job")
            await pilot.press("p")
            assert a.shown is HEALTHY and "no problem seen" in text_of(a, "#verdict")
            await pilot.press("d", "d")
            saved = sorted(tmp_path.glob("ncclcheck-watch-*.json"))
            assert len(saved) == 2  # each save its own file
            assert json.loads(saved[0].read_text())["schema"] == "ncclcheck.watch/2"

    run(go())


def test_enter_opens_switches_and_closes_the_stack() -> None:
    async def go() -> None:
        a = app(Scripted(MISMATCH))
        async with a.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("enter")
            assert a.query_one("#stack").has_class("open") and "rank 2 (pid 1002)" in text_of(a, "#stack-text")
            await pilot.press("up", "enter")  # another row: the stack switches to it
            assert a.query_one("#stack").has_class("open") and "rank 1 (pid 1001)" in text_of(a, "#stack-text")
            await pilot.press("enter")  # the same row again: closed
            assert not a.query_one("#stack").has_class("open")

    run(go())


def test_save_into_a_read_only_directory_says_so(tmp_path: Path) -> None:
    """A directory the user may not write into (as root, which writes anywhere else: /proc)."""
    target = Path("/proc") if os.geteuid() == 0 else tmp_path

    async def go() -> None:
        target.chmod(0o500) if target == tmp_path else None
        a = app(Scripted(HEALTHY), target)
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("d")
            assert any("could not save" in str(n.message) for n in a._notifications) and a.is_running

    run(go())


def test_save_into_a_missing_directory_says_so(tmp_path: Path) -> None:
    async def go() -> None:
        a = app(Scripted(HEALTHY), tmp_path / "gone")
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("d")
            assert any("could not save" in str(n.message) for n in a._notifications) and a.is_running

    run(go())


def test_80x24_keeps_for_cpu_and_rss_and_the_footer_shows_enter() -> None:
    async def go() -> None:
        a = app(Scripted(MISMATCH))
        async with a.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.pause()
            screen = a.export_screenshot()
            for header in (">for<", ">cpu<", ">rss<", "stack"):
                assert header in screen.replace("&#160;", " ").replace(" ", ""), header

    run(go())


def test_long_findings_and_stacks_scroll() -> None:
    many = tuple(
        Finding("straggler", "error", f"rank {r} is slow " * 8, "fix it", ranks=(r,), culprits=(r,)) for r in range(30)
    )
    long_stack = states(job(2), {0: sample(0, stack("all_reduce") * 30), 1: sample(1, stack(None))})
    crowded = dataclasses.replace(long_stack, findings=many)

    async def go() -> None:
        a = app(Scripted(crowded))
        async with a.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("enter")
            await pilot.pause()
            for panel in ("#findings", "#stack"):
                widget = a.query_one(panel)
                assert widget.virtual_size.height > widget.size.height, panel
                widget.scroll_end(animate=False)
                await pilot.pause()
                assert widget.scroll_y > 0, panel

    run(go())


def test_the_flagged_row_stays_in_view_with_the_stack_open() -> None:
    world = 500
    far = states(job(world), *[all_in(world, "all_reduce", r450=sample(450, stack(None, 40, "load_batch")))] * 4)

    async def go() -> None:
        a = app(Scripted(far))
        async with a.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: a.shown is not None and a.query_one(RankTable).cursor_row == 450)
            await pilot.press("enter")
            await pilot.pause()
            await pilot.pause()
            table = a.query_one(RankTable)
            top = table.scroll_y
            assert top <= 450 < top + table.size.height - 1, (top, table.size.height)
            assert "rank 450" in text_of(a, "#stack-text")

    run(go())


def test_rows_off_screen_are_current_once_scrolled_to() -> None:
    """500 ranks, a screen of about 20 rows: rank 450 changes state while far below the screen; with the view
    paused, moving the cursor down to it shows the new state, not the old one."""

    async def go() -> None:
        before = states(job(500), all_in(500, "all_reduce"), all_in(500, "all_reduce"))
        after = states(
            job(500),
            all_in(500, "all_reduce"),
            all_in(500, "all_reduce"),
            all_in(500, "all_reduce", r450=sample(450, stack("barrier", 60))),
        )
        source = Scripted(before, after)
        source.hold = True
        a = app(source)
        async with a.run_test(size=(150, 30)) as pilot:
            await until(pilot, lambda: a.shown is before)
            table = a.query_one(RankTable)
            assert table.row_count == 500 and rows(a)[0][COL["collective"]] == "all_reduce"
            source.hold = False
            await until(pilot, lambda: a.shown is after)
            assert rows(a)[1][COL["for"]] == "≥10s"  # on screen: updated at once; there since the first look: "≥"
            await pilot.press("p")  # paused: only scrolling can bring the rows below up to date now
            table.move_cursor(row=450)
            await pilot.pause()
            assert table.scroll_y > 400
            assert rows(a)[450][COL["collective"]] == "barrier" and rows(a)[450][COL["for"]] == "0s"
            assert rows(a)[449][COL["for"]] == "≥10s" and rows(a)[455][COL["for"]] == "≥10s"

    run(go())


def two_jobs() -> tuple[Job, Job]:
    first = dataclasses.replace(job(2), id="aaa-111", script="train.py --lr 1", cwd="/home/u/a", started=1.7e9)
    second = dataclasses.replace(job(4), id="bbb-222", script="eval.py", cwd="/home/u/b", started=1.7e9 + 60)
    return first, second


def test_several_jobs_open_on_a_picker_and_the_pick_is_watched() -> None:
    picked: list[Job] = []

    def make(chosen: Job) -> Scripted:
        picked.append(chosen)
        return Scripted(MISMATCH)

    async def go() -> None:
        a = WatchApp(None, 0.05, clock=lambda: 100.0, jobs=two_jobs(), make_source=make, samples=samples)
        async with a.run_test(size=(150, 30)) as pilot:
            await pilot.pause()
            assert isinstance(a.screen, JobPicker)
            listed = str(a.screen.query_one("#jobs").get_option_at_index(1).prompt)
            assert "bbb-222" in listed and "eval.py" in listed and "/home/u/b" in listed and "world size 4" in listed
            await pilot.press("down", "enter")
            await until(pilot, lambda: a.shown is not None)
            assert [j.id for j in picked] == ["bbb-222"] and not isinstance(a.screen, JobPicker)

    run(go())


def test_a_slow_rank_is_flagged_with_its_wait_share_and_compared_with_a_typical_one() -> None:
    async def go() -> None:
        a = app(Scripted(SLOW))
        async with a.run_test(size=(120, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert [f.id for f in a.shown.findings] == ["slow-rank"]
            assert text_of(a, "#verdict") == "! slow-rank: see the findings"
            assert [r[COL[""]] for r in rows(a)] == ["", "", "✗", ""]
            assert [r[COL["wait"]] for r in rows(a)] == ["63%", "61%", "2%", "66%"]
            assert a.query_one(RankTable).cursor_row == 2
            assert a.query_one("#compare").has_class("open")
            compared = a.compare_text.shown_text
            assert compared is not None
            lines = compared.plain.splitlines()
            assert "rank 2 (slow)" in lines[0] and "rank 0 (typical)" in lines[0]  # the waiting ones' median
            assert lines[1].split() == ["compute()", "train.py:32", "98%", "37%"]
            assert lines[2].split() == ["waiting", "in", "all_reduce", "train.py:83", "2%", "63%"]
            assert lines[3].split() == ["main", "thread", "CPU", "98%", "37%"]
            marked = [compared.plain[x.start : x.end].strip() for x in compared.spans if x.style == "bold red"]
            assert marked == ["98%", "98%"]  # where the slow rank spends clearly more than the typical one
            await pilot.press("c")  # the user hides it, and it stays hidden with the next samples
            assert not a.query_one("#compare").has_class("open")
            await pilot.pause()
            assert not a.query_one("#compare").has_class("open")
            await pilot.press("c")
            assert a.query_one("#compare").has_class("open")

    run(go())


def test_no_comparison_without_a_slow_finding() -> None:
    """Communication-bound (info), balanced shares, and a mismatch without any shares: no comparison panel."""
    assert [f.id for f in BOUND.findings] == ["communication-bound"] and not BALANCED.findings

    async def go(state: WatchState) -> None:
        a = app(Scripted(state))
        async with a.run_test(size=(120, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert not a.query_one("#compare").has_class("open") and not a.query_one("#compare").display
            waits = [r[COL["wait"]] for r in rows(a)]
            assert waits == ["", "", "", ""] if state is MISMATCH else all(waits)  # no rounds: no shares

    for state in (BOUND, BALANCED, MISMATCH):
        run(go(state))


def test_c_compares_the_rank_under_the_cursor_when_none_is_slow() -> None:
    async def go() -> None:
        a = app(Scripted(BALANCED))
        async with a.run_test(size=(120, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("down", "c")
            assert a.query_one("#compare").has_class("open")
            assert "rank 1  " in text_of(a, "#compare-text")
            assert "rank 0 (typical)" in text_of(a, "#compare-text")  # the median of the others: 30%, 30%, 29%
            await pilot.press("down")  # it follows the cursor
            assert "rank 2  " in text_of(a, "#compare-text")
            await pilot.press("c")
            assert not a.query_one("#compare").has_class("open")
        b = app(Scripted(HEALTHY))  # no rounds sampled: nothing to compare, and it says so
        async with b.run_test(size=(120, 32)) as pilot:
            await until(pilot, lambda: b.shown is not None)
            await pilot.press("c")
            assert not b.query_one("#compare").has_class("open")
            assert any("nothing to compare" in str(n.message) for n in b._notifications)

    run(go())


def share(rank: int, places: tuple[Place, ...], cpu: float | None = None) -> RankShare:
    total = 100
    kinds = tuple((k, sum(p.samples for p in places if p.kind == k) / total) for k in ("collective", "other"))
    return RankShare(rank, "node0", total, 4, 20.0, kinds, places, cpu, 0.0)


def test_the_comparison_text_by_hand() -> None:
    """The lower middle of an even count is typical; a place one rank never showed is '-'; where a rank waits in
    several collectives, their sum too; no CPU row where neither is known."""
    a = share(5, (Place("data", "DataLoader", "/j/t.py:40 (load)", 80), Place("collective", "all_reduce", None, 20)))
    a = a._replace(top=(*a.places, Place("other", "log", "/j/t.py:9 (log)", 3)))  # under 5%: left out
    waiting = [
        share(r, (Place("collective", "all_reduce", None, w), Place("collective", "backward", "/j/t.py:90", 10)))
        for r, w in ((0, 70), (1, 60), (2, 65), (3, 75))
    ]
    assert typical(waiting) is waiting[2] and typical([]) is None
    lines = comparison(Pair(a, "slow", waiting[2])).plain.splitlines()
    assert "rank 5 (slow)" in lines[0] and "rank 2 (typical)" in lines[0]
    assert [line.split()[-2:] for line in lines[1:]] == [["80%", "-"], ["20%", "65%"], ["-", "10%"], ["20%", "75%"]]
    assert lines[1].startswith("waiting for DataLoader") and "t.py:40" in lines[1]
    assert lines[4].startswith("waiting, all collectives") and len(lines) == 5
    narrow = comparison(Pair(a, "", waiting[2]), 50).plain.splitlines()
    assert all(len(line) <= 50 for line in narrow) and narrow[0].split()[-3:] == ["rank", "2", "(typical)"]
    roles = ((2, "slow"), (3, "slow"), (0, "waiting"), (1, "waiting"))
    node = Finding("slow-node", "warning", "node0 is slow", ranks=(0, 1, 2, 3), culprits=(2, 3), roles=roles)
    pair = slow_pair(dataclasses.replace(SLOW, findings=(node,)))
    assert pair is not None and (pair.subject.rank, pair.role, pair.typical.rank) == (2, "slow", 1)


def test_snapshot_mismatch(snap_compare: object) -> None:
    async def first_sample(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)

    a = app(Scripted(MISMATCH))
    assert snap_compare(a, terminal_size=(150, 30), run_before=first_sample)  # type: ignore[operator]


def test_snapshot_mismatch_at_80x24(snap_compare: object) -> None:
    async def first_sample(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)

    a = app(Scripted(MISMATCH))
    assert snap_compare(a, terminal_size=(80, 24), run_before=first_sample)  # type: ignore[operator]


def test_snapshot_slow_rank_at_80x24(snap_compare: object) -> None:
    async def first_sample(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)

    a = app(Scripted(SLOW))
    assert snap_compare(a, terminal_size=(80, 24), run_before=first_sample)  # type: ignore[operator]


def test_snapshot_healthy_with_stack(snap_compare: object) -> None:
    async def open_stack(pilot: object) -> None:
        await until(pilot, lambda: a.shown is not None)
        await pilot.press("down", "enter")  # type: ignore[attr-defined]

    a = app(Scripted(HEALTHY))
    assert snap_compare(a, terminal_size=(150, 30), run_before=open_stack)  # type: ignore[operator]


def test_samples_still_land_while_the_command_palette_is_open() -> None:
    async def go() -> None:
        source = Scripted(MISMATCH, HEALTHY)
        source.hold = True
        a = app(source)
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is MISMATCH)
            await pilot.press("ctrl+p")
            await pilot.pause()
            assert a.screen is not a.screen_stack[0]  # the palette is on top
            source.hold = False
            await until(pilot, lambda: a.shown is HEALTHY)
            assert a.is_running and rows(a)[2][COL[""]] == ""

    run(go())


def test_a_finished_job_is_not_shown_as_a_problem() -> None:
    live = {r: sample(r, stack(None, 80 + r)) for r in range(2)}
    done = states(job(2), live, {r: sample(r, (), status="gone") for r in range(2)})

    async def go() -> None:
        a = app(Scripted(done))
        async with a.run_test(size=(150, 32)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert "finished" in text_of(a, "#verdict") and "✗" not in text_of(a, "#verdict")
            assert a.query_one("#findings").has_class("clear")  # not the red border of a problem
            assert [r[COL[""]] for r in rows(a)] == ["", ""]

    run(go())


def test_several_nodes_header_host_column_and_a_remote_rank_s_stack() -> None:
    """A merged multi-node state: the header counts nodes, rows carry their host, Enter shows a remote rank's
    stack as its agent sent it."""
    from agent_feeds import feed, merged, node_state

    streams = feed((node_state(0, r1=sample(1, stack(None, 41, "load_batch"))), "node0"), (node_state(1), "node1"))
    state = merged(streams)
    silent = merged(feed((node_state(0), "node0")), nodes=2)

    async def go() -> None:
        a = WatchApp(Scripted(state), 0.05, clock=lambda: 100.0, several_nodes=True, samples=samples)  # type: ignore[arg-type]
        async with a.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            assert "nodes 2/2 reporting" in text_of(a, "#job") and "sort: node" in text_of(a, "#job")
            assert [(r[1], r[2]) for r in rows(a)] == [("0", "node0"), ("1", "node0"), ("2", "node1"), ("3", "node1")]
            assert a.table.rank_at(a.table.cursor_row) == 1  # the straggler, on node0
            await pilot.press("down", "down", "enter")
            await until(pilot, lambda: "rank 3 on node1" in text_of(a, "#stack-text"))
            assert "train.py:88" in text_of(a, "#stack-text")
            await pilot.press("s")
            assert a.sort_by == "rank"
        b = app(Scripted(silent))
        async with b.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: b.shown is not None)
            assert "nodes 1/2 reporting, 1 missing" in text_of(b, "#job")

    run(go())


def test_ctrl_c_quits_with_the_interrupted_exit_code() -> None:
    """^C quits as it does in every terminal program (not Textual's "press ctrl+q" toast), with 130 as the exit table
    says; q quits with 0."""

    async def go(key: str) -> int | None:
        a = app(Scripted(MISMATCH))
        async with a.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press(key)
            await until(pilot, lambda: not a.is_running)
        assert not any("ctrl+q" in str(n.message) for n in a._notifications)
        return a.return_code

    assert asyncio.run(go("ctrl+c")) == 130
    assert asyncio.run(go("q")) == 0


def test_80x24_with_the_stack_open_keeps_rows_of_the_rank_table() -> None:
    """The stack panel opened at 80x24 leaves the rank table several rows (it shrank to one), and the stack still
    shows; a long stack scrolls inside its panel instead of taking the table's rows."""
    long_stack = states(job(8), *[all_in(8, "all_reduce", r2=sample(2, stack("all_gather", 57) * 12))] * 4)

    async def go() -> None:
        a = app(Scripted(long_stack))
        async with a.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: a.shown is not None)
            await pilot.press("enter")
            await pilot.pause()
            await pilot.pause()
            table = a.query_one(RankTable)
            assert table.size.height - 1 >= 5, table.size.height  # the header row and at least five ranks
            assert a.query_one("#stack").size.height >= 4
            assert "rank" in text_of(a, "#stack-text")

    run(go())
