"""The one live loop (``sources/live.samples``) that the TUI, ``watch --once``, the agent, ``run``'s sampler and
``smoke --tui`` iterate: poll, hand the look on, wait the delay; a last look once the job is over; a failing poll
shown and polling on only where asked."""

from __future__ import annotations

import threading

import pytest
from watch_states import all_in, job, states

from ncclcheck.model.watch import WatchState
from ncclcheck.sources.live import samples

STATE = states(job(2), all_in(2, "all_reduce"))


class Scripted:
    """Polls ``STATE``; raises at the polls named in ``fail``; sets ``stop`` at poll ``stop_at``."""

    def __init__(self, stop: threading.Event, stop_at: int = 0, fail: tuple[int, ...] = ()) -> None:
        self.stop, self.stop_at, self.fail, self.polls = stop, stop_at, fail, 0

    def poll(self) -> WatchState:
        self.polls += 1
        if self.polls == self.stop_at:
            self.stop.set()
        if self.polls in self.fail:
            raise OSError("/proc went away")
        return STATE


def test_polls_until_stop_waiting_the_delay_between_looks() -> None:
    stop, waits = threading.Event(), []
    source = Scripted(stop, stop_at=3)
    looks = list(samples(source, 1.5, stop, delay=lambda state, interval: interval / 3, wait=waits.append))
    assert [look.state for look in looks] == [STATE] * 3 and not any(look.final for look in looks)
    assert waits == [0.5, 0.5, 0.5] and source.polls == 3  # the stop came during the 3rd poll: no 4th


def test_no_look_once_stopped_unless_a_last_one_is_asked_for() -> None:
    stop = threading.Event()
    stop.set()
    assert list(samples(Scripted(stop), 1.0, stop, wait=lambda s: None)) == []
    (last,) = samples(Scripted(stop), 1.0, stop, wait=lambda s: None, last=True)
    assert last.final and last.state == STATE


def test_a_last_look_follows_the_stop_and_ends_the_loop() -> None:
    stop = threading.Event()
    looks = list(samples(Scripted(stop, stop_at=2), 1.0, stop, wait=lambda s: None, last=True))
    assert [look.final for look in looks] == [False, False, True]  # the stop came during the 2nd poll


def test_a_failing_poll_is_a_look_with_its_error_only_where_asked() -> None:
    stop = threading.Event()
    looks = list(samples(Scripted(stop, stop_at=3, fail=(2,)), 1.0, stop, wait=lambda s: None, keep_going=True))
    assert [look.error for look in looks] == [None, "OSError: /proc went away", None]
    assert looks[1].state is None and looks[2].state == STATE
    with pytest.raises(OSError):
        list(samples(Scripted(threading.Event(), fail=(2,)), 1.0, threading.Event(), wait=lambda s: None))
