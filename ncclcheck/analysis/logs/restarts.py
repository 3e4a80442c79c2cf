"""A job torchrun's agent saw finish: the errors printed before were survived, not what ended it.

When every worker of its group exits 0, torchrun's agent says "worker group successfully finished". Errors printed
before that line, in the same file, did not end the job: a run that torchrun restarted (``--max-restarts``: "Worker
group FAILED. 3/3 attempts left; will restart worker group", by the same logger at the same level), an exception the
code caught and went on from, or an earlier run's. They are kept, as warnings, under one finding that says the job
finished and what failed before; an error after the line, in a file with no such line, or with more occurrences than
its evidence shows, stays an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ncclcheck.analysis.logs.verdict import root_cause
from ncclcheck.model.findings import Evidence, Finding
from ncclcheck.model.ids import logs as logs_ids

RECOVERED_FIX = (
    "the job finished: the first error below is what failed before the restart. A transient fault (an I/O error, a"
    " node or link that came back) is survived by restarts; a bug or a bad node fails again and uses up"
    " --max-restarts: if it recurs, fix it as that error's fix says"
)

FINISHED_FIX = (
    "the job finished: the error below did not end it. Read it to know whether the code meant to go on from it (a"
    " logger's traceback, a skipped sample) or an earlier run in this log failed with it"
)


def recovered(findings: list[Finding], cap: int) -> list[Finding]:
    """The findings with the errors printed before an agent's worker group finished (in the same file) made
    warnings, under a ``job-recovered`` warning; as they are where any error is not such. ``cap``: the most evidence
    a finding keeps (one that holds that many may have had more occurrences, after the group finished)."""
    finished = next((f for f in findings if f.id == logs_ids.WORKER_GROUP_FINISHED), None)
    if finished is None:
        return findings
    ends: dict[str, int] = {}  # each file's last line saying its agent's worker group finished
    for e in finished.evidence:
        ends[e.file] = max(ends.get(e.file, 0), e.line)
    restarts = next((f for f in findings if f.id == logs_ids.WORKER_GROUP_RESTART), None)
    restarted = [e for e in restarts.evidence if e.line < ends.get(e.file, 0)] if restarts is not None else []

    def survived(f: Finding) -> bool:
        return (
            f.severity == "error"
            and 0 < len(f.evidence) < cap  # every occurrence is in its evidence
            and all(e.line < ends.get(e.file, 0) for e in f.evidence)
        )

    def unexplained(f: Finding) -> bool:  # an error line no rule explains, before the finish: it did not end the job
        return f.id == logs_ids.UNRECOGNISED_ERROR and f.severity == "warning" and survived_at(f)

    def survived_at(f: Finding) -> bool:
        return 0 < len(f.evidence) < cap and all(e.line < ends.get(e.file, 0) for e in f.evidence)

    before = [f for f in findings if survived(f)]
    quiet = [f for f in findings if unexplained(f)]
    if any(f.severity == "error" and not survived(f) for f in findings) or not (before or quiet):
        return findings  # an error the finish did not follow: the job's verdict is that error's
    if not before:  # only lines no rule explains: information now, the job finished after them
        return [dataclasses.replace(f, severity="info") if f in quiet else f for f in findings]
    first = root_cause(before) or before[0]  # what the verdict would have been without the finish
    who = f" rank(s) {', '.join(map(str, first.ranks))}" if first.ranks else ""
    if restarted:
        said = f"after torchrun restarted its worker group ({len(restarted)} restart(s) seen); before the restart{who}"
        said += f" failed: {first.message[:200]}"
    else:
        said = f"(torchrun: every local worker exited 0) after{who or ' it'} printed an error that did not end it"
        said += f" (caught and gone on from, printed at its teardown, or an earlier run's): {first.message[:200]}"
    note = Finding(
        logs_ids.JOB_RECOVERED,
        "warning",
        f"the job finished {said}",
        RECOVERED_FIX if restarted else FINISHED_FIX,
        first.ranks,
        tuple(restarted) + finished.evidence[-1:],
    )
    out = [dataclasses.replace(f, severity="warning") if f in before else f for f in findings]
    return [note, *(dataclasses.replace(f, severity="info") if f in quiet else f for f in out)]


RUN_GAP_S = 600.0  # launches further apart than this are separate runs (a node's agents start within seconds)
Launch = tuple[str, int, str]
"""torchrun's start banner: file, line, and its glog time as printed ("0611 22:10:01.120000": month, day, time)."""


def several_runs(launches: Sequence[Launch]) -> list[Finding]:
    """A warning where torchrun started at times more than ``RUN_GAP_S`` apart: these logs hold several runs of the
    job (a rerun, a resubmission), whose errors are read together; nothing where they cannot be told apart."""
    starts = sorted((at, launch) for launch in launches if (at := _glog_seconds(launch[2])) is not None)
    runs: list[list[tuple[float, Launch]]] = []
    for at, launch in starts:
        if not runs or at - runs[-1][-1][0] > RUN_GAP_S:
            runs.append([])
        runs[-1].append((at, launch))
    if len(runs) < 2:
        return []
    when = ", ".join(run[0][1][2].split(".")[0] for run in runs[:6])
    return [
        Finding(
            logs_ids.SEVERAL_RUNS,
            "warning",
            f"these logs may hold {len(runs)} runs of the job: torchrun started at {when} (month-day and time, as"
            " torchrun prints them: a rerun or a resubmission, or an elastic job's node that joined late); an earlier"
            " run's errors and a later run's are read together here",
            "read one run's logs at a time (the latest run's files alone) for that run's verdict",
            (),
            tuple(Evidence(run[0][1][0], run[0][1][1], f"torchrun started at {run[0][1][2]}") for run in runs[:5]),
        )
    ]


def _glog_seconds(time: str) -> float | None:
    """A glog time "MMDD HH:MM:SS[.ffffff]" as seconds into its year (31-day months: only order matters)."""
    try:
        date, clock = time.split()
        hours, minutes, seconds = clock.split(":")
        return ((int(date[:2]) * 31 + int(date[2:4])) * 24 + int(hours)) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        return None
