"""``ncclcheck run`` beside the job: launch it with the evidence switched on, sample it live, pass ^C and SIGTERM
to the launcher (torchrun ends its workers), and wait for it to end; nothing is left running."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ncclcheck.analysis.run.env import job_env
from ncclcheck.collectors.rank_ends import RankEnds
from ncclcheck.collectors.run_job import END_GRACE_S, Launched
from ncclcheck.commands.run.control import finish, with_hook
from ncclcheck.commands.run.live import LiveSampler, Signals
from ncclcheck.commands.run.settings import Evidence, RunSettings
from ncclcheck.commands.run.slow import SlowLog
from ncclcheck.model.run import HangRecord, RankEnd, SlowSoFar
from ncclcheck.signals import handling

ENDING_OURS = "ncclcheck run: --on-hang exit: ending the job (SIGTERM to the launcher, which ends its workers)"
ENDING = (
    "ncclcheck run: asked the launcher to end the job; it may wait for its ranks to exit (torchrun gives them up to "
    "{grace:.0f} s, its grace period, before it kills them) — press ^C again to end them all now"
)


@dataclass(frozen=True)
class Supervised:
    """How the job ended and what was seen while it ran."""

    code: int  # the launcher's return code (negative: the signal that ended it)
    started: float
    ended: float
    hangs: tuple[HangRecord, ...]
    slow: SlowSoFar
    rank_ends: tuple[RankEnd, ...]
    received: tuple[tuple[int, float], ...]  # (signal, when) that came from outside
    interrupted: bool  # the user or a signal ended the job


def supervise(wanted: RunSettings, evidence: Evidence, console: Any) -> Supervised:
    run_dir = wanted.run_dir
    started = time.time()
    env = with_hook(job_env(os.environ, evidence.settings), evidence.hook_dir)
    launched = Launched(list(wanted.argv), env, run_dir.launcher_log)
    signals = Signals(threading.Event(), threading.Event(), threading.Event())
    slow, ends = SlowLog(run_dir, console), RankEnds()
    received: list[tuple[int, float]] = []  # (signal, when)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signals.interrupted.is_set():
            signals.end_now.set()  # a second ^C or SIGTERM: end the tree now
        received.append((signum, time.time()))
        signals.interrupted.set()
        launched.signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)  # torchrun ends its workers

    sampler = LiveSampler(launched, wanted.watching, run_dir, console, slow, ends, signals)
    live = threading.Thread(target=sampler.run, daemon=True)
    with handling((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), on_signal):
        live.start()
        try:
            code = _wait(launched, signals, received, console)
        finally:
            signals.stop.set()
            launched.end()
            launched.close()
            live.join(10.0)
            ends.close()
            finish(run_dir)
    interrupted = signals.interrupted.is_set()
    return Supervised(
        code, started, time.time(), tuple(sampler.hangs), slow.seen, ends.ends(), tuple(received), interrupted
    )


def _wait(launched: Launched, signals: Signals, received: list[tuple[int, float]], console: Any) -> int:
    """Until the launcher exits: end the job when asked (--on-hang exit, a second ^C), say so once."""
    code, told, ending = None, False, False
    while code is None:
        launched.remember_tree()
        if signals.end_now.is_set():
            if not received and not ending:
                console.print(ENDING_OURS, style="yellow")
            ending = True
            launched.end()
        if signals.interrupted.is_set() and not told:
            told = True
            console.print(ENDING.format(grace=END_GRACE_S), style="yellow")
        code = launched.wait(0.5)
    return code
