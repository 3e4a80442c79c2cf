"""Supervise a launched smoke run: show progress, write the JSON as it goes, catch a hang, conclude.

The watchdog: a rank whose last step and heartbeat are older than ``--timeout`` (or ranks that
never appeared) ends the wait; the local ranks are dumped, the nodes exchange what they saw, and
the whole process tree is ended.
"""

from __future__ import annotations

import io
import subprocess
import threading
import time
from contextlib import AbstractContextManager, nullcontext

from rich.console import Console
from rich.status import Status

from ncclcheck import exits
from ncclcheck.analysis.smoke.progress import (
    INIT_GRACE_S,
    STILL_S,
    job_results,
    local_results,
    stalled_ranks,
    standing_still,
)
from ncclcheck.analysis.smoke.summary import (
    failed_rows,
    never_started,
    rank_failed,
    summarise,
    torchrun_report,
    transports,
)
from ncclcheck.collectors import launch as launcher
from ncclcheck.collectors.progress import read_beats, read_progress
from ncclcheck.commands.smoke import hang as hangs
from ncclcheck.model.findings import Finding
from ncclcheck.model.smoke import (
    INTERRUPTED,
    RUNNING,
    Hang,
    Launch,
    OpResult,
    RankProgress,
    SmokeSummary,
    StandingStill,
)
from ncclcheck.report_files import replace_json
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke import op_line, status_line, still_line, to_json

POLL_S = 0.2
# Without a terminal, a line on the ranks standing still at most every quarter of --timeout (and 2 s at least):
# a CI log of a hang shows who stands still and for how long, in a handful of lines.
STILL_EVERY_MIN_S = 2.0


def supervise(
    proc: subprocess.Popen[bytes], launch: Launch, timeout_s: float, json_path: str | None, console: Console
) -> SmokeSummary:
    """Until torchrun exits, a rank is stuck past ``timeout_s``, or no rank ever starts; then the summary."""
    started, hang, never = time.time(), None, False
    shown = Shown(console, max(STILL_EVERY_MIN_S, timeout_s / 4))
    with shown.live():
        while True:
            code = proc.poll()
            ranks, beats, now = read_progress(launch.log_dir), read_beats(launch.log_dir), time.time()
            shown.update(results_of(ranks, launch), standing_still(ranks, beats, now, timeout_s))
            if json_path:
                replace_json(
                    json_path,
                    to_json(summarise(launch, ranks, results_of(ranks, launch), None, (), False, state=RUNNING)),
                )
            if code is not None:
                break
            late = stalled_ranks(ranks, beats, now, timeout_s)
            silent = len(ranks) < launch.nproc and time.time() - started > timeout_s + INIT_GRACE_S
            if silent and not ranks:  # no rank ever started: a launch failure, not a hang
                launcher.end_tree(proc, [])
                never = True
                break
            if late or silent:
                shown.finish()  # the ops that finished print before the watchdog's lines, not after them
                link = hangs.announce(launch)
                hang = hangs.exchange(hangs.dump_ranks(ranks, launch, console), link, launch, console)
                launcher.end_tree(proc, [r.pid for r in ranks if r.pid])
                break
            time.sleep(POLL_S)
    shown.finish()
    summary = conclude(launch, None if never else proc.returncode, hang, never)
    if json_path:
        replace_json(json_path, to_json(summary))
    return summary


def conclude(launch: Launch, code: int | None, hang: Hang | None, never: bool) -> SmokeSummary:
    ranks = read_progress(launch.log_dir)
    errors = () if hang or code == 0 else _errors(code, ranks, launch, never)
    results = results_of(ranks, launch) + failed_rows(ranks, hang, bool(errors))
    finished = hang is None and not never and code == 0
    nccl = transports(launcher.nccl_logs(launch.log_dir)) if launch.backend == "nccl" else ()
    return summarise(launch, ranks, results, hang, errors, finished, nccl)


def interrupted(launch: Launch) -> SmokeSummary:
    """What the run had shown when ^C, SIGTERM or SIGHUP ended it: not a verdict."""
    ranks = read_progress(launch.log_dir)
    return summarise(launch, ranks, results_of(ranks, launch), None, (), False, state=INTERRUPTED)


def _errors(code: int | None, ranks: tuple[RankProgress, ...], launch: Launch, never: bool) -> tuple[Finding, ...]:
    torchrun = torchrun_report(launcher.torchrun_log(launch.log_dir))
    if never or not ranks:
        return (never_started(launch, code, torchrun),)
    local = range(launch.nproc)
    output = {n: launcher.last_output(launch.log_dir, n) for n in local}
    stderr = {n: launcher.stderr_path(launch.log_dir, n) for n in local}
    return (rank_failed(launch, ranks, torchrun.failures, output, stderr),)


def results_of(ranks: tuple[RankProgress, ...], launch: Launch) -> tuple[OpResult, ...]:
    """Node 0 shows the job-wide results rank 0 gathered; other nodes their own ranks' timings."""
    return job_results(ranks) if launch.node_rank == 0 else local_results(ranks, launch.world_size)


class Shown:
    """Progress, each result once: on a terminal one live line replaced in place, else a line per op done.

    Both say which ranks stand still and for how long of their deadline: the live line as it counts, without a
    terminal a line each ``still_every_s`` of it.
    """

    def __init__(self, console: Console, still_every_s: float = STILL_EVERY_MIN_S) -> None:
        self.console = console
        self.results: tuple[OpResult, ...] = ()
        self.printed = 0
        self.status: Status | None = None
        self.still_every_s = still_every_s
        self.next_still_s = still_every_s

    def live(self) -> AbstractContextManager[object]:
        if not self.console.is_terminal:
            return nullcontext()
        self.status = self.console.status("starting the ranks ...")
        return self.status

    def update(self, results: tuple[OpResult, ...], still: tuple[StandingStill, ...] = ()) -> None:
        self.results = results
        if self.status is not None:
            self.status.update(status_line(results, still))
            return
        done = list(dict.fromkeys(r.op for r in results))[:-1]  # an op is done once the next one has results
        for op in done[self.printed :]:
            self.console.print(op_line(op, [r for r in results if r.op == op]))
        self.printed = max(self.printed, len(done))
        self._standing(still)

    def _standing(self, still: tuple[StandingStill, ...]) -> None:
        longest = max((s.still_s for s in still), default=0.0)
        if longest < STILL_S:  # progress again (or never stopped): the count starts over
            self.next_still_s = self.still_every_s
        if longest >= self.next_still_s:
            self.console.print(still_line(still))
            self.next_still_s = longest + self.still_every_s

    def finish(self) -> None:
        if self.status is None:
            ops = list(dict.fromkeys(r.op for r in self.results))
            for op in ops[self.printed :]:
                self.console.print(op_line(op, [r for r in self.results if r.op == op]))
            self.printed = max(self.printed, len(ops))  # a second finish prints nothing twice


def with_tui(proc: subprocess.Popen[bytes], launch: Launch, timeout_s: float, json_path: str | None) -> SmokeSummary:
    """The smoke test's own watchdog in a thread while the watch app shows its ranks; the app closes when done."""
    from ncclcheck.sources.live import samples
    from ncclcheck.sources.smoke import LauncherSource
    from ncclcheck.tui.app import WatchApp

    app = WatchApp(LauncherSource(proc.pid, launch.nproc, timeout_s, launch.log_dir), 1.0, samples=samples)
    done: list[SmokeSummary] = []
    closed = threading.Event()

    def smoke() -> None:
        done.append(supervise(proc, launch, timeout_s, json_path, make_console(io.StringIO())))
        while not closed.is_set():
            if app.is_running:
                app.call_from_thread(app.exit)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=smoke, daemon=True)
    thread.start()
    app.run()
    closed.set()
    if app.return_code == exits.INTERRUPTED:
        raise KeyboardInterrupt  # ^C in the app ends the smoke test as ^C without it does: the job ends too
    thread.join()  # the user may quit the app first: the smoke test still runs to its end
    return done[0]
