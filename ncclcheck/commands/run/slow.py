"""``run``'s slow episodes as they happen: each one's record in the run dir and its one line here.

DIR/slow/slow-<time>-<n>.json   the watch JSON of the look that opened the episode (every rank's stack and where
                                its time went), and ``episode``: its span, culprits and last words, rewritten at
                                most every ``REWRITE_S`` while it lasts and once when it closes
"""

from __future__ import annotations

import os
import time
from typing import Any

from ncclcheck.analysis.run.slow_episodes import after_look, ended
from ncclcheck.model.run import RunDir, SlowEpisode, SlowSoFar
from ncclcheck.model.watch import WatchState
from ncclcheck.report_files import replace_json
from ncclcheck.views.run import episode_json, pace_line, slow_line
from ncclcheck.views.watch import to_json as watch_json

REWRITE_S = 10.0  # an open episode's record is brought up to date at most this often


class SlowLog:
    """The sampler's slow episodes: fed every look, read by the verdict once the sampler is done."""

    def __init__(self, run_dir: RunDir, console: Any) -> None:
        self.run_dir, self.console = run_dir, console
        self.seen = SlowSoFar()
        self.opening: dict[str, Any] = {}  # the watch JSON of the look that opened the open episode
        self.written = 0.0  # when the open episode's record was last written (epoch seconds)

    def look(self, state: WatchState, now: float, interval_s: float) -> None:
        """One look at ``now`` (epoch seconds): open, extend or close an episode, and write what changed."""
        before = self.seen
        n = len(before.episodes) + 1
        path = self.run_dir.slow_record(time.strftime("%Y%m%d-%H%M%S", time.localtime(now)), n)
        self.seen = after_look(before, state, now, path)
        self._closed(before)
        current = self.seen.open
        if current is not None and (before.open is None or before.open.path != current.path):
            self.opening = watch_json(state, interval_s)
            self._write(current)
            self.written = now
            slow_line(current, self.console)
        elif current is not None and now - self.written >= REWRITE_S:
            self._write(current)
            self.written = now
        if self.seen.note is not None and before.note is None:
            pace_line(self.seen.note, self.console)

    def end(self) -> None:
        """The open episode closes: the job is over, or the user ended it."""
        before = self.seen
        self.seen = ended(before)
        self._closed(before)

    def _closed(self, before: SlowSoFar) -> None:
        for e in self.seen.closed[len(before.closed) :]:
            self._write(e)

    def _write(self, episode: SlowEpisode) -> None:
        os.makedirs(os.path.dirname(episode.path), exist_ok=True)
        replace_json(episode.path, {**self.opening, "episode": episode_json(episode)})
