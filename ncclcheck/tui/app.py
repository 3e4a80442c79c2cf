"""The live rank table: a header, one row per rank (bad rows in red), findings, and the chosen rank's stack.

The app takes a *data source* (anything with ``poll() -> WatchState``): the live one samples the job,
tests hand it a scripted one. The table owns the polling worker, a thread that posts each state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Static
from textual.widgets.data_table import ColumnKey
from textual.worker import get_current_worker

from ncclcheck.model.watch import RankView, WatchState
from ncclcheck.views.watch_report import HEALTHY, cells, flagged, to_json

COLUMNS = ("", "rank", "local", "host", "pid", "state", "collective", "call site", "for", "cpu", "rss")
# Fixed widths where the values are bounded; host and call site grow (auto width) when a longer value comes.
WIDTHS = {"": 1, "rank": 5, "local": 5, "pid": 8, "state": 10, "collective": 24, "for": 6, "cpu": 5, "rss": 7}
SORTS = ("rank", "time in state", "state")
MARGIN = 20  # rows above and below the screen kept up to date too


class Source(Protocol):
    def poll(self) -> WatchState: ...


class Polled(Message):
    """A new state from the data source."""

    def __init__(self, state: WatchState) -> None:
        super().__init__()
        self.state = state


def plain_row(v: RankView) -> tuple[str, ...]:
    text = cells(v)
    return tuple(text[c] for c in COLUMNS)


def _cell(text: str, bad: bool) -> Text:
    return Text(text, style="bold red" if bad else "")


class RankTable(DataTable[Text]):
    """The rank table; its worker polls the source every ``interval`` seconds."""

    def __init__(self, source: Source, interval: float) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, cursor_foreground_priority="renderable", id="ranks")
        self.source, self.interval = source, interval
        self.shown_cells: dict[int, tuple[bool, tuple[str, ...]]] = {}  # per row position: red, texts shown
        self.latest: list[tuple[bool, RankView]] = []  # per row position: red, the rank's latest view
        self.stale: set[int] = set()  # positions whose shown cells may be older than ``latest``

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column, key=column or "glyph", width=WIDTHS.get(column))
        self.poll_source()

    @work(thread=True, exclusive=True)
    def poll_source(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            self.post_message(Polled(self.source.poll()))
            if worker.cancelled_event.wait(self.interval):
                return

    def show(self, state: WatchState, only_flagged: bool, sort: str) -> None:
        """Rows are positions, not ranks: a new order or a new sample only changes cells, and only those on
        screen are written now (``sync_visible``), so a refresh costs what the screen shows."""
        bad = flagged(state)
        views = [v for v in state.ranks if v.rank in bad or not only_flagged]
        key: Callable[[RankView], Any] = {
            "rank": lambda v: v.rank,
            "time in state": lambda v: (-v.since_s, v.rank),
            "state": lambda v: (v.rank not in bad, v.sample.status, v.rank),
        }[sort]
        views.sort(key=key)
        chosen = self.rank_at(self.cursor_row)
        self.latest = [(v.rank in bad, v) for v in views]
        with self.app.batch_update():
            for position in range(len(views), self.row_count):
                self.remove_row(str(position))
                self.shown_cells.pop(position, None)
            blank = tuple(Text() for _ in COLUMNS)
            for position in range(self.row_count, len(views)):
                self.add_row(*blank, key=str(position))
            self.stale = set(range(len(views)))
            ranks = [v.rank for v in views]
            if chosen is not None and chosen in ranks and ranks.index(chosen) != self.cursor_row:
                self.move_cursor(row=ranks.index(chosen))  # the cursor stays on its rank
            self.sync_visible()

    def rank_at(self, position: int) -> int | None:
        return self.latest[position][1].rank if 0 <= position < len(self.latest) else None

    def sync_visible(self) -> None:
        """Bring the rows on screen (and a margin) up to date; the others wait until scrolled to."""
        if not self.stale:
            return
        top, height = int(self.scroll_y), self.size.height or len(self.latest)
        for position in range(max(top - MARGIN, 0), min(top + height + MARGIN, len(self.latest))):
            if position not in self.stale:
                continue
            self.stale.discard(position)
            red, view = self.latest[position]
            texts = plain_row(view)
            was_red, before = self.shown_cells.get(position, (red, ()))
            if red == was_red and texts == before:
                continue
            for i, (column, text) in enumerate(zip(COLUMNS, texts)):
                if red != was_red or i >= len(before) or before[i] != text:  # only what changed
                    grow = column not in WIDTHS and len(text) > self.columns[ColumnKey(column)].content_width
                    self.update_cell(str(position), column or "glyph", _cell(text, red), update_width=grow)
            self.shown_cells[position] = (red, texts)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.sync_visible()

    def on_resize(self) -> None:
        self.sync_visible()


class WatchApp(App[None]):
    """``ncclcheck watch``: q quit, p pause the view, s cycle sort, f flagged only, d save a snapshot."""

    CSS = """
    #job { height: 1; background: $primary-background; }
    #ranks { height: 1fr; min-height: 3; }
    #findings { height: auto; max-height: 12; border: round $error; }
    #findings.clear { border: round $success; }
    #stack { height: auto; max-height: 16; border: round $secondary; display: none; }
    #stack.open { display: block; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("q", "quit", "quit"),
        Binding("p", "pause", "pause"),
        Binding("s", "sort", "sort"),
        Binding("f", "flagged", "flagged only"),
        Binding("d", "save", "save snapshot"),
        Binding("escape", "close_stack", "close stack", show=False),
    ]

    def __init__(
        self, source: Source, interval: float, clock: Callable[[], float] = time.monotonic, save_dir: Path | None = None
    ) -> None:
        super().__init__()
        self.source, self.interval, self.clock = source, interval, clock
        self.save_dir = save_dir or Path.cwd()
        self.state: WatchState | None = None  # the latest sample
        self.shown: WatchState | None = None  # what the view shows (frozen while paused)
        self.paused, self.only_flagged, self.sort_by = False, False, SORTS[0]
        self.received_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static(Text("ncclcheck watch: waiting for the first sample…"), id="job")
        yield RankTable(self.source, self.interval)
        yield Static(id="findings")
        yield Static(id="stack")
        yield Footer()

    def on_polled(self, message: Polled) -> None:
        self.state, self.received_at = message.state, self.clock()
        if not self.paused:
            self.refresh_view()

    def refresh_view(self) -> None:
        if self.state is None:
            return
        self.shown = self.state
        self.query_one(RankTable).show(self.shown, self.only_flagged, self.sort_by)
        self.query_one("#job", Static).update(self.header())
        self.query_one("#findings", Static).update(self.findings_text())
        self.query_one("#findings").set_class(not self.shown.findings, "clear")
        self.update_stack()

    def header(self) -> Text:
        state = self.shown
        assert state is not None
        job, age = state.job, self.clock() - self.received_at
        nodes = f", {job.nodes} node{'s' if job.nodes > 1 else ''}" if job.nodes else ""
        flags = " · PAUSED" if self.paused else ""
        flags += " · flagged only" if self.only_flagged else ""
        return Text(
            f"job {job.id} · world size {job.world_size}{nodes} · {len(state.ranks)} rank(s) here · "
            f"every {self.interval:g}s · last sample {age:.0f}s ago · sort: {self.sort_by}{flags}"
        )

    def findings_text(self) -> Text:
        assert self.shown is not None
        if not self.shown.findings:
            return Text(HEALTHY, style="green")
        text = Text()
        for f in self.shown.findings:
            text.append(f"✗ {f.kind}: ", style="bold red")
            text.append(f"{f.message}\n")
            text.append(f"  fix: {f.fix}\n", style="dim")
        for note in self.shown.notes:
            text.append(f"! {note}\n", style="yellow")
        return text

    def selected(self) -> RankView | None:
        table = self.query_one(RankTable)
        rank = table.rank_at(table.cursor_row)
        return next((v for v in self.shown.ranks if v.rank == rank), None) if self.shown else None

    def on_data_table_row_selected(self, _: DataTable.RowSelected) -> None:
        self.query_one("#stack").toggle_class("open")
        self.update_stack()

    def update_stack(self) -> None:
        view = self.selected()
        if view is None:
            return
        s = view.sample
        text = Text(f"rank {s.rank} (pid {s.pid}) main thread, innermost first\n", style="bold")
        for f in s.stack:
            if f.native:
                text.append(f"  {f.function[:120]}  {f.filename.rsplit('/', 1)[-1]}\n", style="dim")
            else:
                text.append(f"  {f.function}  {f.filename}:{f.line}\n")
        if not s.stack:
            text.append(f"  no stack: {s.stack_error or s.status}\n", style="yellow")
        self.query_one("#stack", Static).update(text)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_view() if not self.paused else self.query_one("#job", Static).update(self.header())

    def action_sort(self) -> None:
        self.sort_by = SORTS[(SORTS.index(self.sort_by) + 1) % len(SORTS)]
        self.refresh_view()

    def action_flagged(self) -> None:
        self.only_flagged = not self.only_flagged
        self.refresh_view()

    def action_close_stack(self) -> None:
        self.query_one("#stack").remove_class("open")

    def action_save(self) -> None:
        if self.state is None:
            return
        path = self.save_dir / f"ncclcheck-watch-{self.state.job.id.replace('/', '_').replace(':', '_')}.json"
        path.write_text(json.dumps(to_json(self.state, self.interval, 0), indent=1))
        self.notify(f"saved {path}")
