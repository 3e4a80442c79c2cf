"""``run``'s sampler beside the job: a hang record where ranks stand still or die, but nothing once the job was ended
by ^C or a signal (the ranks then exit because the launcher ends them: neither a death nor an early leaver)."""

from __future__ import annotations

import argparse
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from watch_states import job, sample, stack, states

from ncclcheck.commands.run import live
from ncclcheck.model.run import HangRecord
from ncclcheck.model.watch import WatchState


class Launched:
    class proc:
        pid = 999


def dead_state() -> WatchState:
    """Rank 1 was seen, then gone, while rank 0 waits in all_reduce."""
    waiting, gone = sample(0, stack("all_reduce")), sample(1, (), status="gone")
    return states(job(2), {0: waiting, 1: sample(1, stack(None))}, {0: waiting, 1: gone}, {0: waiting, 1: gone})


class Ends:
    """RankEnds as the sampler uses it: it is handed every rank it sees."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.added: set[int] = set()

    def add(self, rank: int, pid: int) -> None:
        self.added.add(rank)


def sample_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupt: bool
) -> tuple[list[HangRecord], set[int], list[str]]:
    """Run the sampler over two polls of the same state; ``interrupt``: ^C arrives during the first poll."""
    for sub in ("hangs", "fr"):
        (tmp_path / sub).mkdir()
    stop, end_now, interrupted = threading.Event(), threading.Event(), threading.Event()
    polls: list[int] = []

    class Scripted:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.job, self.flight = job(2), ()

        def poll(self) -> WatchState:
            polls.append(1)
            if interrupt:
                interrupted.set()  # the signal handler sets it before the launcher is signalled
            if len(polls) >= 2:
                stop.set()
            return dead_state()

        def close(self) -> None:
            pass

    monkeypatch.setattr(live, "discover", lambda pid: (job(2),))
    monkeypatch.setattr(live, "LiveSource", Scripted)
    monkeypatch.setattr(live, "launcher_endpoint", lambda pid: None)
    args = argparse.Namespace(interval=0.01, stall=4.0, on_hang="watch")
    hangs: list[HangRecord] = []
    ends = Ends()
    console = Console(file=io.StringIO())
    live.sample_live(Launched(), args, str(tmp_path), console, hangs, ends, stop, end_now, interrupted)  # type: ignore[arg-type]
    return hangs, ends.added, (tmp_path / "watch-agent.jsonl").read_text().splitlines()


def test_a_rank_that_dies_while_the_job_runs_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert any(f.severity == "error" for f in dead_state().findings)
    hangs, watched, lines = sample_twice(tmp_path, monkeypatch, interrupt=False)
    assert len(hangs) == 1 and 1 in hangs[0].culprits and watched == {0, 1}
    assert len(lines) == 3  # two looks, and the last one once the job is over
    assert (tmp_path / "hangs" / Path(hangs[0].path).name).is_file()


def test_ranks_ended_by_a_signal_are_neither_a_hang_nor_early_leavers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hangs, _, _ = sample_twice(tmp_path, monkeypatch, interrupt=True)
    assert hangs == []
    assert not list((tmp_path / "hangs").iterdir())
