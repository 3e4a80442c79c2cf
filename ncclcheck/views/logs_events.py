"""Render the events ``ncclcheck logs --events`` lists: one line each, as the reader saw it; or JSON lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ncclcheck.model.logs import Event
from ncclcheck.views.plain import plain

SCHEMA = "ncclcheck.events/1"
STYLE = {"error": "bold red", "warning": "yellow", "info": ""}


def header_json(files: list[str], least: str) -> dict[str, Any]:
    """The first JSON line: the schema, the files and the least severity listed; one event per line follows."""
    return {"schema": SCHEMA, "files": files, "least": least}


def event_json(event: Event) -> dict[str, Any]:
    return plain(event)


def render_event(event: Event, console: Console) -> None:
    rank = f" rank {event.rank}" if event.rank is not None else ""
    host = f" {event.host}" if event.host else ""
    head = Text(f"{event.file}:{event.line} ", style="dim")
    head.append(f"{event.severity:<7} ", style=STYLE[event.severity])
    head.append(f"{event.emitter}{rank}{host}: ", style="bold")
    head.append(event.text)
    console.print(head)
