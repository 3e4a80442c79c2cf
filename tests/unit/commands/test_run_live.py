"""``run``'s sampler beside the job: a hang record where ranks stand still or die, but nothing once the job was ended
by ^C or a signal (the ranks then exit because the launcher ends them: neither a death nor an early leaver); a slow
episode's record and line while the same ranks hold the others back."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from watch_states import all_in, job, sample, stack, states

from ncclcheck.commands.run import live
from ncclcheck.commands.run.slow import SlowLog
from ncclcheck.model.findings import Finding
from ncclcheck.model.run import HangRecord, RunDir
from ncclcheck.model.watch import WatchState
from ncclcheck.sources.watch import GroupFiles
from ncclcheck.views.watch import SCHEMA as WATCH_SCHEMA


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
            self.groups = GroupFiles(self.job)  # no control dir in these pids: no groups

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
    kept: list[str] = []  # the incident (RAS, GPUs, dmesg: collectors of their own tests) only noted here
    monkeypatch.setattr(live, "keep_incident", lambda run_dir, record, *rest: kept.append(record.path))
    watching = live.Watching(stall_s=4.0, interval_s=0.01, on_hang="watch")
    ends = Ends()
    console = Console(file=io.StringIO())
    slow = SlowLog(RunDir(str(tmp_path)), console)
    signals = live.Signals(stop, end_now, interrupted)
    sampler = live.LiveSampler(Launched(), watching, RunDir(str(tmp_path)), console, slow, ends, signals)  # type: ignore[arg-type]
    sampler.run()
    hangs: list[HangRecord] = sampler.hangs
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


def slow_state(*culprits: int) -> WatchState:
    """Three ranks in all_reduce; ``culprits``: a look that names them as holding the others back."""
    state = states(job(3), all_in(3, "all_reduce"))
    if not culprits:
        return state
    who = f"rank {culprits[0]}"
    message = f"{who} holds the others back: ranks 0-1 wait for it; the job would run about 2.5× faster"
    found = Finding("slow-rank", "warning", message, "look at it", (0, 1, 2), culprits=culprits)
    return dataclasses.replace(state, findings=(found,))


def sample_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, looks: list[WatchState], every: float = 5.0
) -> tuple[list[HangRecord], SlowLog, str]:
    """Run the sampler over ``looks`` (then the last one again while the job ends), ``every`` seconds apart on the
    sampler's clock; the hangs, the slow episodes and what it printed."""
    for sub in ("hangs", "fr"):
        (tmp_path / sub).mkdir()
    stop, end_now, interrupted = threading.Event(), threading.Event(), threading.Event()
    clock = [1_700_000_000.0]
    polls: list[int] = []

    class Clock:
        """The sampler's wall clock: a look ``every`` seconds (its waits stay real, and short)."""

        monotonic, strftime, localtime = time.monotonic, time.strftime, time.localtime

        @staticmethod
        def time() -> float:
            return clock[0]

    class Scripted:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.job, self.flight = job(3), ()
            self.groups = GroupFiles(self.job)  # no control dir in these pids: no groups

        def poll(self) -> WatchState:
            polls.append(1)
            clock[0] += every
            if len(polls) > len(looks):  # every look was judged: the job ends (a look may be judged once more)
                stop.set()
            return looks[min(len(polls), len(looks)) - 1]

        def close(self) -> None:
            pass

    monkeypatch.setattr(live, "time", Clock)
    monkeypatch.setattr(live, "discover", lambda pid: (job(3),))
    monkeypatch.setattr(live, "LiveSource", Scripted)
    monkeypatch.setattr(live, "launcher_endpoint", lambda pid: None)
    kept: list[str] = []  # the incident (RAS, GPUs, dmesg: collectors of their own tests) only noted here
    monkeypatch.setattr(live, "keep_incident", lambda run_dir, record, *rest: kept.append(record.path))
    watching = live.Watching(stall_s=4.0, interval_s=0.01, on_hang="watch")
    out = io.StringIO()
    console = Console(file=out, width=400)
    slow = SlowLog(RunDir(str(tmp_path)), console)
    signals = live.Signals(stop, end_now, interrupted)
    sampler = live.LiveSampler(Launched(), watching, RunDir(str(tmp_path)), console, slow, Ends(), signals)  # type: ignore[arg-type]
    sampler.run()
    hangs: list[HangRecord] = sampler.hangs
    return hangs, slow, out.getvalue()


def test_a_slow_rank_is_one_episode_recorded_once_and_closed_after_two_looks_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = [slow_state(2), slow_state(2), slow_state(), slow_state(2), slow_state(), slow_state(), slow_state()]
    hangs, slow, printed = sample_looks(tmp_path, monkeypatch, looks)
    assert hangs == [] and slow.seen.open is None
    (episode,) = slow.seen.episodes
    assert episode.culprits == (2,) and episode.looks == 3 and episode.seconds == 15.0  # the 1st to the 4th look
    assert printed.count("ncclcheck run: slow: ") == 1
    assert f"ncclcheck run: slow: {looks[0].findings[0].message} (recorded in {episode.path})" in printed
    (record,) = (tmp_path / "slow").iterdir()
    assert str(record) == episode.path and record.name.startswith("slow-") and record.name.endswith("-1.json")
    data = json.loads(record.read_text())
    assert data["schema"] == WATCH_SCHEMA and [f["kind"] for f in data["findings"]] == ["slow-rank"]
    assert data["episode"]["looks"] == 3 and data["episode"]["seconds"] == 15.0  # its closing, written


def test_new_culprits_are_a_new_episode_and_a_hang_keeps_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = [slow_state(2), slow_state(1), slow_state(1), dead_state()]
    hangs, slow, printed = sample_looks(tmp_path, monkeypatch, looks)
    assert [e.culprits for e in slow.seen.episodes] == [(2,), (1,)] and slow.seen.open is None
    assert printed.count("ncclcheck run: slow: ") == 2 and len(hangs) == 1
    assert "ncclcheck run: hang: " in printed
    records = sorted((tmp_path / "slow").iterdir())
    assert [json.loads(p.read_text())["episode"]["culprits"] for p in records] == [[2], [1]]


def test_an_episode_still_open_when_the_job_ends_is_closed_and_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, slow, _ = sample_looks(tmp_path, monkeypatch, [slow_state(2), slow_state(2), slow_state(2)])
    (episode,) = slow.seen.episodes
    assert slow.seen.open is None and episode.looks == 4  # the last look judged once more while the job ended
    assert json.loads(Path(episode.path).read_text())["episode"]["looks"] == 4
