"""The live view: a header, the verdict, one row per rank (the ranks to blame flagged ✗), findings, and a stack.

The app takes a *data source* (anything with ``poll() -> WatchState``): the live one samples the job,
tests hand it a scripted one. The app owns the polling worker, a thread that posts each state and keeps
polling when a poll fails (the error is shown). With several jobs and no source, it opens on a picker.
Only Textual's public API is used, so the runtime requirement can be a range.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from ncclcheck.analysis.watch.judge import next_delay
from ncclcheck.model.watch import Job, RankView, WatchState
from ncclcheck.report_files import new_json
from ncclcheck.views.watch import (
    CULPRIT,
    STYLE,
    UNDECIDED,
    VERDICT_STYLE,
    cells,
    flags,
    jobs_lines,
    nodes_line,
    to_json,
)

# The columns a user needs to judge a rank come first, so that they stay on an 80-column screen.
COLUMNS = ("", "rank", "state", "collective", "for", "cpu", "rss", "call site", "pid", "local", "host")
# Several nodes: the host comes right after the rank, and the rows are grouped by node.
NODE_COLUMNS = ("", "rank", "host", "state", "collective", "for", "call site", "cpu", "rss", "pid", "local")
# Fixed widths where the values are bounded; call site and host grow (auto width) when a longer value comes.
WIDTHS = {"": 1, "rank": 5, "state": 8, "collective": 16, "for": 6, "cpu": 5, "rss": 6, "pid": 8, "local": 5}
SORTS = ("rank", "time in state", "state")
NODE_SORTS = ("node", "rank", "time in state", "state")
MARGIN = 20  # rows above and below the screen kept up to date too


class Source(Protocol):
    def poll(self) -> WatchState: ...


class Polled(Message):
    """A new state from the data source."""

    def __init__(self, state: WatchState) -> None:
        super().__init__()
        self.state = state


class PollFailed(Message):
    """The data source raised; polling goes on."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def plain_row(v: RankView, flag: str = "", columns: tuple[str, ...] = COLUMNS) -> tuple[str, ...]:
    text = cells(v, flag)
    return tuple(text[c] for c in columns)


def _style(flag: str) -> str:
    return "bold red" if flag == CULPRIT else "bold yellow" if flag == UNDECIDED else ""


class Line(Widget):
    """One line of text. A new text repaints the line alone: a Static's update lays the whole screen out
    again, and the rank table with it, every second."""

    def __init__(self, text: Text | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = text or Text()

    def render(self) -> Text:
        return self.text

    def set(self, text: Text) -> None:
        if text != self.text:
            self.text = text
            self.refresh()


class Block(Static):
    """A panel's text: laid out again only when the text changed."""

    shown_text: Text | None = None

    def set(self, text: Text) -> None:
        if text != self.shown_text:
            self.shown_text = text
            self.update(text)


class RankTable(DataTable[Text]):
    """The rank table: rows are positions, refreshed only where they are on screen."""

    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("enter", "select_cursor", "stack")  # DataTable's own hides it; the footer should show it
    ]

    def __init__(self, columns: tuple[str, ...] = COLUMNS) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, cursor_foreground_priority="renderable", id="ranks")
        self.columns_shown = columns
        self.shown_cells: dict[int, tuple[str, tuple[str, ...]]] = {}  # per row position: flag, texts shown
        self.latest: list[tuple[str, RankView]] = []  # per row position: flag, the rank's latest view
        self.stale: set[int] = set()  # positions whose shown cells may be older than ``latest``
        self.grown: dict[str, int] = {}  # the widest text written so far in each auto-width column

    def on_mount(self) -> None:
        for column in self.columns_shown:
            self.add_column(column, key=column or "flag", width=WIDTHS.get(column))
        self.watch(self, "scroll_y", lambda: self.sync_visible(), init=False)

    def show(self, state: WatchState, only_flagged: bool, sort: str) -> None:
        """A new order or a new sample only changes cells, and only those on screen are written now
        (``sync_visible``), so a refresh costs what the screen shows."""
        marks = flags(state)
        views = [v for v in state.ranks if v.rank in marks or not only_flagged]
        order = {n.host: i for i, n in enumerate(state.nodes)}
        key: Callable[[RankView], Any] = {
            "node": lambda v: (order.get(v.sample.host, len(order)), v.sample.host, v.rank),
            "rank": lambda v: v.rank,
            "time in state": lambda v: (-v.since_s, v.rank),
            "state": lambda v: (v.rank not in marks, marks.get(v.rank) != CULPRIT, v.sample.status, v.rank),
        }[sort]
        views.sort(key=key)
        chosen = self.rank_at(self.cursor_row)
        self.latest = [(marks.get(v.rank, ""), v) for v in views]
        with self.app.batch_update():
            for position in range(len(views), self.row_count):
                self.remove_row(str(position))
                self.shown_cells.pop(position, None)
            blank = tuple(Text() for _ in self.columns_shown)
            for position in range(self.row_count, len(views)):
                self.add_row(*blank, key=str(position))
            self.stale = set(range(len(views)))
            ranks = [v.rank for v in views]
            if chosen is not None and chosen in ranks and ranks.index(chosen) != self.cursor_row:
                self.move_cursor(row=ranks.index(chosen))  # the cursor stays on its rank
            self.sync_visible()

    def rank_at(self, position: int) -> int | None:
        return self.latest[position][1].rank if 0 <= position < len(self.latest) else None

    def position_of(self, rank: int) -> int | None:
        return next((i for i, (_, v) in enumerate(self.latest) if v.rank == rank), None)

    def sync_visible(self) -> None:
        """Bring the rows on screen (and a margin) up to date; the others wait until scrolled to."""
        if not self.stale:
            return
        top, height = int(self.scroll_y), self.size.height or len(self.latest)
        for position in range(max(top - MARGIN, 0), min(top + height + MARGIN, len(self.latest))):
            if position not in self.stale:
                continue
            self.stale.discard(position)
            flag, view = self.latest[position]
            texts = plain_row(view, flag, self.columns_shown)
            was_flag, before = self.shown_cells.get(position, (flag, ()))
            if flag == was_flag and texts == before:
                continue
            for i, (column, text) in enumerate(zip(self.columns_shown, texts)):
                if flag != was_flag or i >= len(before) or before[i] != text:  # only what changed
                    grow = column not in WIDTHS and len(text) > self.grown.get(column, 0)
                    if grow:
                        self.grown[column] = len(text)
                    self.update_cell(str(position), column or "flag", Text(text, style=_style(flag)), update_width=grow)
            self.shown_cells[position] = (flag, texts)

    def on_resize(self) -> None:
        """Smaller (the stack panel opened): the cursor's row, often the flagged rank, stays in view."""
        if self.row_count:
            self.move_cursor(row=self.cursor_row)
        self.sync_visible()


class JobPicker(Screen[Job]):
    """Several jobs on this node: pick one (Enter), or q to quit."""

    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [Binding("q", "app.quit", "quit")]

    def __init__(self, jobs: tuple[Job, ...]) -> None:
        super().__init__()
        self.jobs = jobs

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{len(self.jobs)} jobs on this node: pick one with Enter", style="bold"), id="job")
        lines = jobs_lines(self.jobs)
        yield OptionList(*(Option(Text(line.strip()), id=str(i)) for i, line in enumerate(lines)), id="jobs")
        yield Footer()

    def on_option_list_option_selected(self, message: OptionList.OptionSelected) -> None:
        self.dismiss(self.jobs[int(message.option.id or 0)])


class WatchApp(App[None]):
    """``ncclcheck watch``: Enter stack, q quit, p pause the view, s cycle sort, f flagged only, d save."""

    CSS = """
    #job { height: 1; background: $primary-background; }
    #verdict { height: 1; }
    #ranks { height: 1fr; min-height: 3; }
    #findings { height: auto; max-height: 10; border: round $error; }
    #findings.clear { border: round $success; }
    #stack { height: auto; max-height: 14; border: round $secondary; display: none; }
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
        self,
        source: Source | None,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        save_dir: Path | None = None,
        jobs: tuple[Job, ...] = (),
        make_source: Callable[[Job], Source] | None = None,
        several_nodes: bool = False,
    ) -> None:
        super().__init__()
        self.several_nodes = several_nodes
        self.sorts = NODE_SORTS if several_nodes else SORTS
        self.source, self.interval, self.clock = source, interval, clock
        self.jobs, self.make_source = jobs, make_source
        self.save_dir = save_dir or Path.cwd()
        self.state: WatchState | None = None  # the latest sample
        self.shown: WatchState | None = None  # what the view shows (frozen while paused)
        self.paused, self.only_flagged, self.sort_by = False, False, self.sorts[0]
        self.received_at = 0.0
        self.stack_rank: int | None = None  # whose stack the open stack panel shows
        self.cursor_placed = False  # the cursor went to the first flagged rank once; then it is the user's
        self.saves = 0

    def compose(self) -> ComposeResult:
        # Held, not queried: a query looks at the active screen, which is the picker or the command palette
        # while those are open, and a sample must still land on the main screen then.
        self.job_line = Line(Text("ncclcheck watch: waiting for the first sample…"), id="job")
        self.verdict_line = Line(id="verdict")
        self.table = RankTable(NODE_COLUMNS if self.several_nodes else COLUMNS)
        self.findings_panel, self.findings_text_box = VerticalScroll(id="findings"), Block(id="findings-text")
        self.stack_panel, self.stack_text = VerticalScroll(id="stack"), Block(id="stack-text")
        yield self.job_line
        yield self.verdict_line
        yield self.table
        with self.findings_panel:
            yield self.findings_text_box
        with self.stack_panel:
            yield self.stack_text
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)
        if self.source is not None:
            self.poll_source()
        elif self.jobs and self.make_source is not None:
            self.push_screen(JobPicker(self.jobs), self.start_job)

    def start_job(self, job: Job | None) -> None:
        if job is None or self.make_source is None:
            return
        self.source = self.make_source(job)
        self.poll_source()

    @work(thread=True, exclusive=True)
    def poll_source(self) -> None:
        worker = get_current_worker()
        state = None
        while not worker.is_cancelled and self.source is not None:
            try:
                state = self.source.poll()
                self.post_message(Polled(state))
            except Exception as exc:  # shown, and polling goes on: a transient /proc or py-spy failure
                self.post_message(PollFailed(f"{type(exc).__name__}: {exc}"))
            if worker.cancelled_event.wait(next_delay(state, self.interval)):
                return

    def on_polled(self, message: Polled) -> None:
        self.state, self.received_at = message.state, self.clock()
        if not self.paused:
            self.refresh_view()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(f"sampling failed: {message.error} (still trying)", severity="error", timeout=6)

    def tick(self) -> None:
        """Once a second: the header's 'last sample N s ago' keeps counting while a poll hangs."""
        if self.shown is not None and self.job_line.is_attached:
            self.job_line.set(self.header())

    def refresh_view(self) -> None:
        if self.state is None or not self.table.is_attached:  # the app is closing
            return
        self.shown = self.state
        self.table.show(self.shown, self.only_flagged, self.sort_by)
        self.place_cursor(self.table)
        self.job_line.set(self.header())
        verdict = self.shown.verdict
        self.verdict_line.set(Text(verdict.message, style=VERDICT_STYLE.get(verdict.status, "")))
        self.findings_text_box.set(self.findings_text())
        problems = any(f.severity in ("error", "warning") for f in self.shown.findings)
        self.findings_panel.set_class(not problems, "clear")  # a red border only for something wrong
        self.findings_panel.display = bool(self.shown.findings or self.shown.notes)
        self.update_stack()

    def place_cursor(self, table: RankTable) -> None:
        """The first time a rank is flagged, the cursor goes to it (culprits first); later it is the user's."""
        if self.cursor_placed or self.shown is None:
            return
        marks = flags(self.shown)
        first = min(marks, key=lambda r: (marks[r] != CULPRIT, r), default=None)
        position = table.position_of(first) if first is not None else None
        if position is not None:
            table.move_cursor(row=position)
            self.cursor_placed = True

    def header(self) -> Text:
        state = self.shown
        assert state is not None
        job, age = state.job, self.clock() - self.received_at
        nodes = f", {job.nodes} node{'s' if job.nodes > 1 else ''}" if job.nodes else ""
        if state.nodes:
            nodes = f" · {nodes_line(state.nodes)}"
        flags_text = " · PAUSED" if self.paused else ""
        flags_text += " · flagged only" if self.only_flagged else ""
        return Text(
            f"job {job.id} · world size {job.world_size}{nodes} · {len(state.ranks)} {'seen' if state.nodes else 'here'} · every "
            f"{self.interval:g}s · last sample {age:.0f}s ago · sort: {self.sort_by}{flags_text}"
        )

    def findings_text(self) -> Text:
        assert self.shown is not None
        text = Text()
        for f in self.shown.findings:
            text.append(
                f"{'✗' if f.severity == 'error' else '!' if f.severity == 'warning' else '·'} {f.id}: ",
                style=STYLE[f.severity],
            )
            text.append(f"{f.message}\n")
            if f.fix:
                text.append(f"  fix: {f.fix}\n", style="dim")
        for note in self.shown.notes:
            text.append(f"! {note}\n", style="yellow")
        text.rstrip()
        return text

    def view_of(self, rank: int | None) -> RankView | None:
        return next((v for v in self.shown.ranks if v.rank == rank), None) if self.shown else None

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        self.toggle_stack(self.table.rank_at(message.cursor_row))

    def toggle_stack(self, rank: int | None) -> None:
        """Enter: open the stack of the rank under the cursor; on the rank already shown, close it."""
        if self.stack_panel.has_class("open") and rank == self.stack_rank:
            self.stack_panel.remove_class("open")
            return
        self.stack_rank = rank
        self.stack_panel.add_class("open")
        self.update_stack()

    def update_stack(self) -> None:
        view = self.view_of(self.stack_rank)
        if view is None:
            return
        s = view.sample
        on = f" on {s.host}" if self.several_nodes and s.host else ""
        text = Text(f"rank {s.rank}{on} (pid {s.pid}) main thread, innermost first\n", style="bold")
        for f in s.stack:
            if f.native:
                text.append(f"  {f.function[:120]}  {f.filename.rsplit('/', 1)[-1]}\n", style="dim")
            else:
                text.append(f"  {f.function}  {f.filename}:{f.line}\n")
        if not s.stack:
            text.append(f"  no stack: {s.stack_error or s.status}\n", style="yellow")
        text.rstrip()
        self.stack_text.set(text)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_view() if not self.paused else self.tick()

    def action_sort(self) -> None:
        self.sort_by = self.sorts[(self.sorts.index(self.sort_by) + 1) % len(self.sorts)]
        self.refresh_view()

    def action_flagged(self) -> None:
        self.only_flagged = not self.only_flagged
        self.refresh_view()

    def action_close_stack(self) -> None:
        self.stack_panel.remove_class("open")

    def action_save(self) -> None:
        """d: the latest state as JSON, a new file each time; a directory that refuses it is said, not raised."""
        if self.state is None:
            return
        self.saves += 1
        job = self.state.job.id.replace("/", "_").replace(":", "_")
        path = self.save_dir / f"ncclcheck-watch-{job}-{time.strftime('%Y%m%d-%H%M%S')}-{self.saves}.json"
        try:
            new_json(str(path), to_json(self.state, self.interval))
        except OSError as exc:
            self.notify(
                f"could not save {path}: {exc.strerror or exc} (run from a writable directory)",
                severity="error",
                timeout=8,
            )
            return
        self.notify(f"saved {path}")
