"""One look at a live source, as the one live loop (``ncclcheck.sources.live.samples``) hands it on."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.model.watch import WatchState


@dataclass(frozen=True)
class Look:
    """A poll's state, or what the poll raised (only where the loop was asked to keep going); ``final``: the look
    taken once the stop came (a loop asked for a last look: the job is over)."""

    state: WatchState | None
    error: str | None = None
    final: bool = False
