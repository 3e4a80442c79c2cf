"""The time a log line was written, where its writer stamped it: an ISO 8601 date and time at the line's start
(Python logging's ``%(asctime)s``, ``ts``/``moreutils``' and journald's ISO output, Kubernetes' CRI log files,
CloudWatch exports), after a launcher's rank prefix at most. Read to order errors that different files hold (one log
per rank or per node, no torchrun table to order them): only stamps that say the same of their zone are compared."""

from __future__ import annotations

import datetime
import re
from typing import NamedTuple

ISO = re.compile(
    r"^(?:\[(?:default)?rank\d+\]:\s?|\d+: |\s*\|\s*)?\[?"
    r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?(?P<zone>Z|[+-]\d\d:?\d\d)?(?![\d:])"
)


class Instant(NamedTuple):
    """When a line was written: seconds since the epoch (a stamp without a zone is read as if it were UTC), and
    whether its stamp gave its zone (only instants alike in that are compared)."""

    seconds: float
    zoned: bool


def instant(raw: str) -> Instant | None:
    """The instant a line's ISO stamp gives, as written (its prefixes on); None: none, or no real date and time."""
    match = ISO.match(raw)
    if match is None:
        return None
    date, time, frac, zone = match.group("date", "time", "frac", "zone")
    text = f"{date}T{time}" + (f".{frac[:6]}" if frac else "")
    try:
        at = datetime.datetime.fromisoformat(text)
    except ValueError:  # 2026-13-45: digits, not a date
        return None
    if zone is None:
        return Instant(at.replace(tzinfo=datetime.timezone.utc).timestamp(), False)
    offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[-2:])) * 60
    return Instant(at.replace(tzinfo=datetime.timezone.utc).timestamp() - offset, True)
