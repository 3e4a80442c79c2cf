"""``ncclcheck run``: what was switched on for the job, what was seen live, and the verdict at the end."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport


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


WATCH_SCHEMA_PREFIX = "ncclcheck.watch/"  # a hang record is the watch JSON of the look that found the hang


def hang_json(watch: dict[str, Any], ended_job: bool) -> dict[str, Any]:
    """A hang record as ``run`` writes it to DIR/hangs/: the look's watch JSON, and ``ended_job`` when --on-hang exit
    ended the job after it (so that ``logs RUN_DIR`` knows who ended it)."""
    return watch | ({"ended_job": True} if ended_job else {})


def hang_from_json(data: Any, path: str, written: float) -> HangRecord | None:
    """A hang record read back (``written``: the file's mtime, for a record without its own time), or None when it
    is not a watch JSON with a hang's finding (a partial write, another file). Its errors, else its warnings: run
    records a straggler whose line still moves and a start-up wait as warnings."""
    try:
        findings = data.get("findings", [])
        errors = [f for f in findings if f.get("severity") == "error"]
        errors = errors or [f for f in findings if f.get("severity") == "warning"]
        if not str(data.get("schema", "")).startswith(WATCH_SCHEMA_PREFIX) or not errors:
            return None
        first = errors[0]
        hosts = sorted({str(r.get("host")) for r in data.get("ranks", []) if r.get("host")})
        return HangRecord(
            path,
            float(data.get("time") or written),
            tuple(str(f["kind"]) for f in errors),
            tuple(int(r) for r in first.get("ranks", [])),
            tuple(int(r) for r in first.get("culprits", [])),
            str(first["message"]),
            ",".join(hosts),
            data.get("ended_job") is True,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


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


@dataclass(frozen=True)
class RunDir:
    """Where ``ncclcheck run`` keeps a job's evidence: every path of the run directory, for every writer and reader.

    DIR/manifest.json, DIR/report.json, DIR/watch-agent.jsonl; DIR/logs/launcher.log; DIR/nccl/ (NCCL_DEBUG_FILE);
    DIR/fr/ (Flight Recorder dumps rank_<N>, dump pipes pipe_<N>.pipe, early copies early-<k>/);
    DIR/hangs/hang-<time>-<n>.json; DIR/slow/slow-<time>-<n>.json; DIR/control/ (the hook, sockets, hang-*/).
    """

    root: str

    HANGS = "hangs"  # the folder's name: ``logs`` finds hang records under any path by it
    FR = "fr"  # ... and the early Flight Recorder copies under it
    AGENT_LINES = "watch-agent.jsonl"
    HOOK_FILES = ("sitecustomize.py", "ncclcheck_hook_p2p.py")  # the hook, as copied into control/hook/

    def _at(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def folders(self) -> tuple[str, ...]:
        """The folders made before the job starts (control/ is made by the hook's setup)."""
        return (self.logs, self.nccl, self.fr, self.hangs, self.slow)

    @property
    def logs(self) -> str:
        return self._at("logs")

    @property
    def launcher_log(self) -> str:
        return self._at("logs", "launcher.log")

    @property
    def nccl(self) -> str:
        return self._at("nccl")

    @property
    def nccl_file(self) -> str:
        """NCCL_DEBUG_FILE: one file per process (%h host, %p pid)."""
        return self._at("nccl", "nccl.%h.%p")

    @property
    def fr(self) -> str:
        return self._at(self.FR)

    @property
    def fr_dumps(self) -> str:
        """TORCH_FR_DUMP_TEMP_FILE: each rank dumps to this prefix and its global rank."""
        return self._at(self.FR, "rank_")

    @property
    def fr_pipes(self) -> str:
        """TORCH_NCCL_DEBUG_INFO_PIPE_FILE: each rank's dump pipe is this prefix, its rank and ``.pipe``."""
        return self._at(self.FR, "pipe_")

    @property
    def hangs(self) -> str:
        return self._at(self.HANGS)

    @property
    def slow(self) -> str:
        return self._at("slow")

    @property
    def control(self) -> str:
        return self._at("control")

    @property
    def hook(self) -> str:
        return self._at("control", "hook")

    @property
    def manifest(self) -> str:
        return self._at("manifest.json")

    @property
    def report(self) -> str:
        return self._at("report.json")

    @property
    def agent_lines(self) -> str:
        return self._at(self.AGENT_LINES)

    def hang(self, stamp: str, n: int) -> str:
        """The ``n``-th hang record, written at ``stamp`` (%Y%m%d-%H%M%S)."""
        return self._at(self.HANGS, f"hang-{stamp}-{n}.json")

    def slow_record(self, stamp: str, n: int) -> str:
        """The ``n``-th slow episode's record, opened at ``stamp`` (%Y%m%d-%H%M%S)."""
        return self._at("slow", f"slow-{stamp}-{n}.json")

    def incident(self, hang_path: str) -> str:
        """The folder beside a hang's record: its control-plane answers and the rest of its incident."""
        return self._at("control", os.path.splitext(os.path.basename(hang_path))[0])


@dataclass(frozen=True)
class RunOutcome:
    """What a run came to: the job, the evidence switched on and kept, what was seen live, and the verdict; the
    terminal and report.json (ncclcheck.run/1) render it whole."""

    command: tuple[str, ...]
    run_dir: RunDir
    host: str
    exit_code: int
    duration_s: float
    verdict: RunVerdict
    report: LogReport  # ``logs`` over the run dir at the end
    findings: tuple[Finding, ...] = ()
    hangs: tuple[HangRecord, ...] = ()
    settings: tuple[EnvSetting, ...] = ()
    notes: tuple[str, ...] = ()
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the evidence kept, by kind, as report.json lists it
    log_files: tuple[str, ...] = ()  # what the report was made from
    slow: tuple[SlowEpisode, ...] = ()
    pace: PaceNote | None = None
