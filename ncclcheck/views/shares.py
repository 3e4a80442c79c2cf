"""Where a rank's time goes beside a typical rank's, place by place: the panel the live view shows under a
``slow-rank`` or ``slow-node`` finding (and, on request, for any rank).

A typical rank is the one whose share of waiting in collectives is the median of the ranks it is picked from (the
lower middle one for an even count): for a slow finding, the ranks that wait for the slow one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.shares import Place, RankShare
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import WatchState

SLOW = (watch_ids.SLOW_RANK, watch_ids.SLOW_NODE)
ROWS = 3  # places compared: the ones either rank spends most of its time in
LEAST = 0.05  # a place under this share for both is left out: it tells nothing, and an 80x24 screen has no room
APART = 0.10  # a difference in share worth marking (as the slow-rank finding's gap)
LABEL_WIDTH, SITE_WIDTH = 26, 20  # the most they take; a narrow screen gets less of both


@dataclass(frozen=True)
class Pair:
    """The rank looked at (its role in the finding; none where the user picked it) and a typical rank beside."""

    subject: RankShare
    role: str
    typical: RankShare


def typical(shares: Sequence[RankShare]) -> RankShare | None:
    """The rank whose wait share is the median of these (the lower middle one for an even count)."""
    ordered = sorted(shares, key=lambda x: (x.wait, x.rank))
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def slow_pair(state: WatchState) -> Pair | None:
    """The first rank a slow finding blames, beside the typical one of those that wait for it."""
    finding = next((f for f in state.findings if f.id in SLOW and f.culprits), None)
    if finding is None:
        return None
    by_rank = {x.rank: x for x in state.shares}
    subject = by_rank.get(finding.culprits[0])
    other = typical([by_rank[r] for r, role in finding.roles if role == "waiting" and r in by_rank])
    return Pair(subject, "slow", other) if subject is not None and other is not None else None


def selected_pair(state: WatchState, rank: int | None) -> Pair | None:
    """Any rank beside the typical one of the others, where both were sampled."""
    subject = next((x for x in state.shares if x.rank == rank), None)
    other = typical([x for x in state.shares if x.rank != rank])
    return Pair(subject, "", other) if subject is not None and other is not None else None


def comparison(pair: Pair, width: int = 78) -> Text:
    """A line per place (the kind, what, the call site), each rank's share of its samples there, and the main
    thread's CPU, in ``width`` columns; the subject's share bold red where it spends clearly more than the typical
    rank's."""
    a, b = pair.subject, pair.typical
    heads = (f"rank {a.rank}" + (f" ({pair.role})" if pair.role else ""), f"rank {b.rank} (typical)")
    widths = tuple(len(h) + 2 for h in heads)
    room = width - sum(widths)
    label = max(min(LABEL_WIDTH, room - SITE_WIDTH, room * 3 // 5), 12)
    site_width = max(min(SITE_WIDTH, room - label), 10)
    text = Text(
        _fit("where the time goes", label) + _fit("call site", site_width),
        style="bold",
        no_wrap=True,
        overflow="ellipsis",
    )
    text.append("".join(h.rjust(w) for h, w in zip(heads, widths)) + "\n", style="bold")
    for name, site, mine, theirs in _rows(a, b):
        text.append(_fit(name, label) + _fit(site, site_width))
        text.append(_percent(mine).rjust(widths[0]), style="bold red" if _apart(mine, theirs) else "")
        text.append(_percent(theirs).rjust(widths[1]) + "\n")
    text.rstrip()
    return text


def _rows(a: RankShare, b: RankShare) -> list[tuple[str, str, float | None, float | None]]:
    """The places either rank spends most in; every collective together where a rank waits in several; its CPU."""
    keys = [(p.kind, p.what, p.site) for p in (*a.places, *b.places)]
    shares = {k: (_share(a, k), _share(b, k)) for k in dict.fromkeys(keys)}
    kept = [k for k, (x, y) in shares.items() if max(x or 0.0, y or 0.0) >= LEAST]
    kept.sort(key=lambda k: -max(shares[k][0] or 0.0, shares[k][1] or 0.0))
    out = [(_label(kind, what), short(site) if site else "", *shares[kind, what, site]) for kind, what, site in kept]
    out = out[:ROWS]
    if any(sum(1 for p in x.places if p.kind == "collective") > 1 for x in (a, b)):
        out.append(("waiting, all collectives", "", a.wait, b.wait))
    if a.cpu_percent is not None or b.cpu_percent is not None:
        out.append(("main thread CPU", "", _cpu(a), _cpu(b)))
    return out


def _cpu(x: RankShare) -> float | None:
    return None if x.cpu_percent is None else x.cpu_percent / 100


def _share(x: RankShare, key: tuple[str, str, str | None]) -> float | None:
    """The share of the rank's samples at that place; None where it is not among its places."""
    place: Place | None = next((p for p in x.places if (p.kind, p.what, p.site) == key), None)
    return place.samples / x.samples if place is not None and x.samples else None


def _label(kind: str, what: str) -> str:
    return {
        "collective": f"waiting in {what}",
        "p2p": f"in {what}",
        "data": "waiting for DataLoader",
        "io": f"in {what} (I/O)",
    }.get(kind, f"{what}()")


def _apart(mine: float | None, theirs: float | None) -> bool:
    return (mine or 0.0) - (theirs or 0.0) >= APART


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _fit(text: str, width: int) -> str:
    """Left-aligned in ``width`` columns (a space kept after it), cut with an ellipsis where longer."""
    return (text if len(text) < width else text[: width - 2] + "…").ljust(width)
