"""The live view's widgets: the rank table (rows refreshed only where they are on screen), the one-line and
panel texts, and the job picker. Each is a pure view with a ``show``/``set`` method; the app owns the polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option

from ncclcheck.model.shares import RankShare
from ncclcheck.model.watch import Job, RankView, WatchState
from ncclcheck.views.watch import CULPRIT, UNDECIDED, cells, flags, jobs_lines

# The columns a user needs to judge a rank come first, so that they stay on an 80-column screen (``wait``: its
# share of the last minute waiting in collectives, empty until rounds of its stacks were sampled).
COLUMNS = ("", "rank", "state", "collective", "for", "wait", "cpu", "rss", "call site", "pid", "local", "host")
# Several nodes: the host comes right after the rank, and the rows are grouped by node.
NODE_COLUMNS = ("", "rank", "host", "state", "collective", "for", "wait", "call site", "cpu", "rss", "pid", "local")
# Fixed widths where the values are bounded; call site and host grow (auto width) when a longer value comes.
WIDTHS = {
    "": 1,
    "rank": 5,
    "state": 8,
    "collective": 26,
    "for": 6,
    "wait": 4,
    "cpu": 5,
    "rss": 6,
    "pid": 8,
    "local": 5,
}
SORTS = ("rank", "time in state", "state")
NODE_SORTS = ("node", "rank", "time in state", "state")
MARGIN = 20  # rows above and below the screen kept up to date too


def plain_row(
    v: RankView,
    flag: str = "",
    columns: tuple[str, ...] = COLUMNS,
    share: RankShare | None = None,
    window_s: float | None = None,
) -> tuple[str, ...]:
    text = cells(v, flag, share, window_s)
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
        self.latest: list[tuple[str, RankView, RankShare | None]] = []  # per row position: flag, view, shares
        self.window_s: float | None = None  # how long the shown state's job has been watched
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
        shares = {x.rank: x for x in state.shares}
        self.latest = [(marks.get(v.rank, ""), v, shares.get(v.rank)) for v in views]
        self.window_s = state.window_s
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
        return next((i for i, (_, v, _) in enumerate(self.latest) if v.rank == rank), None)

    def sync_visible(self) -> None:
        """Bring the rows on screen (and a margin) up to date; the others wait until scrolled to."""
        if not self.stale:
            return
        top, height = int(self.scroll_y), self.size.height or len(self.latest)
        for position in range(max(top - MARGIN, 0), min(top + height + MARGIN, len(self.latest))):
            if position not in self.stale:
                continue
            self.stale.discard(position)
            flag, view, share = self.latest[position]
            texts = plain_row(view, flag, self.columns_shown, share, self.window_s)
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
