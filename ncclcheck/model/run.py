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


@dataclass(frozen=True)
class RunVerdict:
    status: str  # pass, fail, hang
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
