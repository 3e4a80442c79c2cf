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


class Source(Protocol):
    def poll(self) -> WatchState: ...


class Polled(Message):
    """A new state from the data source."""

    def __init__(self, state: WatchState) -> None:
        super().__init__()
        self.state = state


def row(v: RankView, bad: bool) -> tuple[Text, ...]:
    text = cells(v)
    return tuple(Text(text[c], style="bold red" if bad else "") for c in COLUMNS)


class RankTable(DataTable[Text]):
    """The rank table; its worker polls the source every ``interval`` seconds."""

    def __init__(self, source: Source, interval: float) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, cursor_foreground_priority="renderable", id="ranks")
        self.source, self.interval = source, interval
        self.shown_cells: dict[str, tuple[Text, ...]] = {}

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
        bad = flagged(state)
        views = [v for v in state.ranks if v.rank in bad or not only_flagged]
        key: Callable[[RankView], Any] = {
            "rank": lambda v: v.rank,
            "time in state": lambda v: (-v.since_s, v.rank),
            "state": lambda v: (v.rank not in bad, v.sample.status, v.rank),
        }[sort]
        views.sort(key=key)
        rendered = {str(v.rank): row(v, v.rank in bad) for v in views}  # each row built once per refresh
        wanted = list(rendered)
        current = [str(k.value) for k in self.rows]
        with self.app.batch_update():
            if current != wanted:  # order or membership changed: rebuild, keeping the cursor on its rank
                chosen = current[self.cursor_row] if current and 0 <= self.cursor_row < len(current) else None
                for k in current:
                    self.remove_row(k)
                for k, cells in rendered.items():
                    self.add_row(*cells, key=k)
                if chosen in wanted:
                    self.move_cursor(row=wanted.index(chosen))
            else:
                for k, cells in rendered.items():
                    before = self.shown_cells.get(k, ())
                    for i, (column, cell) in enumerate(zip(COLUMNS, cells)):
                        if i >= len(before) or before[i] != cell:  # only what changed: 4,096 rows stay cheap
                            grow = column not in WIDTHS and len(cell) > self.columns[ColumnKey(column)].content_width
                            self.update_cell(k, column or "glyph", cell, update_width=grow)
        self.shown_cells = rendered


class WatchApp(App[None]):
    """``ncclcheck watch``: q quit, p pause the view, s cycle sort, f flagged only, d save a snapshot."""

    CSS = """
    #job { height: 1; background: $primary-background; }
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
        if self.shown is None or not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((v for v in self.shown.ranks if str(v.rank) == key), None)

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
