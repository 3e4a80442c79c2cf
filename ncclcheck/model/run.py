"""``ncclcheck run``: what was switched on for the job, what was seen live, and the verdict at the end."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvSetting:
    """One piece of evidence switched on before the job starts (or left as the user set it)."""

    names: tuple[str, ...]  # every name torch or NCCL reads for it (newest first)
    value: str  # what ncclcheck sets; the user's own value when ``kept``
    what: str  # what it gives
    cost: str
    kept: bool = False  # the user set it: left alone
    kept_name: str = ""  # which of the names the user set


@dataclass(frozen=True)
class HangRecord:
    """A hang seen live: the watch JSON written to the run dir, and its one-line summary."""

    path: str
    time: float
    kinds: tuple[str, ...]
    ranks: tuple[int, ...]
    culprits: tuple[int, ...]
    message: str
    host: str = ""
    ended_job: bool = False  # ``--on-hang exit``: ncclcheck ended the job after recording this hang


@dataclass(frozen=True)
class RunVerdict:
    status: str  # pass, slow, fail, hang
    root_cause: str | None
    ranks: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class RankEnd:
    """A rank process that ended while ``run`` watched it: when (epoch seconds, to the millisecond) and its exit code
    (negative: the signal that killed it; None: its launcher reaped it before it could be read)."""

    rank: int
    pid: int
    time: float
    exit_code: int | None


@dataclass(frozen=True)
class SlowEpisode:
    """A stretch of the run in which the same ranks held the others back (``slow-rank`` or ``slow-node``): its
    record in the run dir, from where the first naming look's evidence began to the last look that named it (epoch
    seconds), and the last naming look's words."""

    path: str
    start: float
    end: float
    kind: str  # slow-rank, slow-node
    culprits: tuple[int, ...]
    message: str
    looks: int  # looks that named it
    fix: str = ""
    factor: float | None = (
        None  # how many times faster the job would run without the wait, as the last naming look said
    )
    missed: int = 0  # looks since the last that named it, while it is open

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class PaceNote:
    """``communication-bound`` as the run's looks saw it: every rank waits much in its collectives, none behind."""

    first: float
    last: float
    looks: int
    message: str
    fix: str


@dataclass(frozen=True)
class SlowSoFar:
    """The run's slow episodes so far (``open``: the one the last looks still name), and its pace note."""

    closed: tuple[SlowEpisode, ...] = ()
    open: SlowEpisode | None = None
    note: PaceNote | None = None

    @property
    def episodes(self) -> tuple[SlowEpisode, ...]:
        return self.closed + ((self.open,) if self.open is not None else ())


@dataclass(frozen=True)
class Incident:
    """What ``run`` kept of a hang beside its record (``control/<hang>/``): each file by name, and what it could not
    have, with why."""

    folder: str
    kept: tuple[tuple[str, str], ...]  # (name, path)
    missing: tuple[tuple[str, str], ...]  # (what, why)

    def to_json(self) -> dict[str, object]:
        return {"folder": self.folder, "kept": dict(self.kept), "missing": dict(self.missing)}
