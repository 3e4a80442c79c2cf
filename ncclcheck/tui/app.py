"""The live view: a header, the verdict, one row per rank (the ranks to blame flagged ✗), findings, where a slow
rank's time goes beside a typical rank's, and a stack.

The app takes a *data source* (anything with ``poll() -> WatchState``): the live one samples the job,
tests hand it a scripted one; and the live loop that paces it (``samples``, handed in by the command: the app
imports only views and model). The app owns the polling worker, a thread that posts each state and keeps
polling when a poll fails (the error is shown). With several jobs and no source, it opens on a picker.
Only Textual's public API is used, so the runtime requirement can be a range.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer
from textual.worker import get_current_worker

from ncclcheck.exits import INTERRUPTED
from ncclcheck.model.live import Look
from ncclcheck.model.watch import Job, RankView, WatchState
from ncclcheck.report_files import new_json
from ncclcheck.tui.widgets import COLUMNS, NODE_COLUMNS, NODE_SORTS, SORTS, Block, JobPicker, Line, RankTable
from ncclcheck.views.shares import Pair, comparison, selected_pair, slow_pair
from ncclcheck.views.watch import (
    CULPRIT,
    STYLE,
    VERDICT_STYLE,
    flags,
    nodes_line,
    to_json,
)

SHORT = 30  # rows: a screen shorter than this shares itself between the table and the open stack


class Source(Protocol):
    def poll(self) -> WatchState: ...


class Samples(Protocol):
    """The live loop (``ncclcheck.sources.live.samples``): a source's looks, paced, until ``stop``."""

    def __call__(
        self, source: Source, interval_s: float, stop: threading.Event, *, keep_going: bool
    ) -> Iterator[Look]: ...


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


class WatchApp(App[None]):
    """``ncclcheck watch``: Enter stack, q quit, p pause the view, s cycle sort, f flagged only, d save, c compare.

    The comparison opens by itself under a slow-rank or slow-node finding: the findings say who is slow, the
    comparison where its time goes instead; c hides it, or opens it for the rank under the cursor.
    """

    CSS = """
    #job { height: 1; background: $primary-background; }
    #verdict { height: 1; }
    #ranks { height: 1fr; min-height: 3; }
    #findings { height: auto; max-height: 10; border: round $error; }
    #findings.clear { border: round $success; }
    #compare { height: auto; max-height: 8; border: round $warning; display: none; }
    #compare.open { display: block; }
    #stack { height: auto; max-height: 14; border: round $secondary; display: none; }
    #stack.open { display: block; }
    /* A short screen with the stack open: the panels take shares of it, not fixed rows (at 80×24 fixed heights
       left the rank table one row). */
    Screen.crowded #findings { max-height: 25%; }
    Screen.crowded #compare { max-height: 20%; }
    Screen.crowded #stack { max-height: 35%; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("q", "quit", "quit"),
        # ^C quits as everywhere else in a terminal (Textual's default only says "press ctrl+q"), with ^C's exit code.
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("p", "pause", "pause"),
        Binding("s", "sort", "sort"),
        Binding("f", "flagged", "flagged only"),
        Binding("d", "save", "save snapshot"),
        Binding("c", "compare", "compare"),
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
        *,
        samples: Samples,
    ) -> None:
        super().__init__()
        self.samples = samples
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
        self.compare: bool | None = None  # c: the user's choice; None: shown while a slow finding is
        self.saves = 0

    def compose(self) -> ComposeResult:
        # Held, not queried: a query looks at the active screen, which is the picker or the command palette
        # while those are open, and a sample must still land on the main screen then.
        self.job_line = Line(Text("ncclcheck watch: waiting for the first sample…"), id="job")
        self.verdict_line = Line(id="verdict")
        self.table = RankTable(NODE_COLUMNS if self.several_nodes else COLUMNS)
        self.findings_panel, self.findings_text_box = VerticalScroll(id="findings"), Block(id="findings-text")
        self.compare_panel, self.compare_text = VerticalScroll(id="compare"), Block(id="compare-text")
        self.compare_panel.border_subtitle = "c hides"  # the footer has no room left for c at 80 columns
        self.stack_panel, self.stack_text = VerticalScroll(id="stack"), Block(id="stack-text")
        yield self.job_line
        yield self.verdict_line
        yield self.table
        with self.findings_panel:
            yield self.findings_text_box
        with self.compare_panel:
            yield self.compare_text
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
        source = self.source
        if source is None:
            return
        # a poll that raises is shown, and polling goes on: a transient /proc or py-spy failure
        for look in self.samples(source, self.interval, get_current_worker().cancelled_event, keep_going=True):
            if self.source is not source:
                return  # the source was taken away: no more samples
            self.post_message(Polled(look.state) if look.state is not None else PollFailed(look.error or "?"))

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
        self.update_compare()
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

    def compared(self) -> Pair | None:
        """The slow rank beside a typical one; without a slow finding, the rank under the cursor once asked for."""
        if self.shown is None or self.compare is False:
            return None
        pair = slow_pair(self.shown)
        if pair is None and self.compare:
            pair = selected_pair(self.shown, self.table.rank_at(self.table.cursor_row))
        return pair

    def update_compare(self) -> None:
        pair = self.compared()
        if pair is not None:
            self.compare_text.set(comparison(pair, self.size.width - 4))  # the border, and room for a scrollbar
        self.compare_panel.set_class(pair is not None, "open")
        self.fit_panels()

    def fit_panels(self) -> None:
        """Share a short screen between the rank table and the panels while the stack is open (see CSS: crowded)."""
        self.table.screen.set_class(self.stack_panel.has_class("open") and self.size.height < SHORT, "crowded")

    def on_resize(self) -> None:
        self.fit_panels()

    def action_compare(self) -> None:
        """c: hide the comparison, or show it (for the rank under the cursor where no rank is found slow)."""
        self.compare = not self.compare_panel.has_class("open")
        self.update_compare()
        if self.compare and not self.compare_panel.has_class("open"):
            self.notify("nothing to compare yet: where each rank's time goes comes from rounds of sampled stacks")

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        if self.compare and self.shown is not None and slow_pair(self.shown) is None:
            self.update_compare()  # the comparison follows the cursor

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        self.toggle_stack(self.table.rank_at(message.cursor_row))

    def toggle_stack(self, rank: int | None) -> None:
        """Enter: open the stack of the rank under the cursor; on the rank already shown, close it."""
        if self.stack_panel.has_class("open") and rank == self.stack_rank:
            self.action_close_stack()
            return
        self.stack_rank = rank
        self.stack_panel.add_class("open")
        self.fit_panels()
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

    def action_interrupt(self) -> None:
        self.exit(return_code=INTERRUPTED)

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
        self.fit_panels()

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
