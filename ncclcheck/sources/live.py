"""The one live loop: poll a live source, hand its state on, wait ``next_delay``; every live view and sampler
(the TUI, ``watch --once``, the agent, ``run``'s sampler, ``smoke --tui``) iterates it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from ncclcheck.analysis.watch.judge import next_delay
from ncclcheck.model.live import Look
from ncclcheck.model.watch import WatchState


class Polled(Protocol):
    def poll(self) -> WatchState: ...


def samples(
    source: Polled,
    interval_s: float,
    stop: threading.Event,
    *,
    delay: Callable[[WatchState | None, float], float] = next_delay,
    wait: Callable[[float], object] | None = None,
    last: bool = False,
    keep_going: bool = False,
) -> Iterator[Look]:
    """Looks until ``stop`` is set (or the caller stops iterating): poll, hand the look on, then wait
    ``delay(state, interval_s)`` (quick looks while a verdict forms). ``wait``: how to wait (default: on ``stop``);
    ``last``: one more look once ``stop`` is set (the job is over: its end is seen); ``keep_going``: a poll that
    raises is handed on as the look's error and polling goes on (the TUI shows it), else it ends the loop."""
    state: WatchState | None = None
    pause = wait or stop.wait
    while True:
        final = stop.is_set()
        if final and not last:
            return
        try:
            state = source.poll()
        except Exception as exc:
            if not keep_going:
                raise
            yield Look(None, f"{type(exc).__name__}: {exc}", final)
        else:
            yield Look(state, final=final)
        if final:
            return
        pause(delay(state, interval_s))
