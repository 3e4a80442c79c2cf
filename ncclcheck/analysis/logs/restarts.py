"""A job torchrun restarted and that then finished: the errors before the restart were survived, not what ended it.

torchrun's agent restarts its worker group when a worker fails while restarts are left (``--max-restarts``), and says
so ("Worker group FAILED. 3/3 attempts left; will restart worker group"); when every worker of the group exits 0, it
says "worker group successfully finished" (both at INFO, by the same logger: a log that shows one shows the other).
Errors printed before that line, in the same file, were those of a run the restart replaced: they are kept, as
warnings, under one finding that says the job recovered; an error after it, in a file with no such line, or with more
occurrences than its evidence shows, stays an error.
"""

from __future__ import annotations

import dataclasses

from ncclcheck.analysis.logs.verdict import root_cause
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import logs as logs_ids

RECOVERED_FIX = (
    "the job finished: the first error below is what failed before the restart. A transient fault (an I/O error, a"
    " node or link that came back) is survived by restarts; a bug or a bad node fails again and uses up"
    " --max-restarts: if it recurs, fix it as that error's fix says"
)


def recovered(findings: list[Finding], cap: int) -> list[Finding]:
    """The findings with the errors a restart survived made warnings, under a ``job-recovered`` warning; as they are
    where no agent's worker group finished after a restart in the same file. ``cap``: the most evidence a finding
    keeps (one that holds that many may have had more occurrences, after the group finished)."""
    restarts = next((f for f in findings if f.id == logs_ids.WORKER_GROUP_RESTART), None)
    finished = next((f for f in findings if f.id == logs_ids.WORKER_GROUP_FINISHED), None)
    if restarts is None or finished is None:
        return findings
    ends: dict[str, int] = {}  # each file's last line saying its agent's worker group finished
    for e in finished.evidence:
        ends[e.file] = max(ends.get(e.file, 0), e.line)
    restarted = [e for e in restarts.evidence if e.line < ends.get(e.file, 0)]
    if not restarted:
        return findings

    def survived(f: Finding) -> bool:
        return (
            f.severity == "error"
            and 0 < len(f.evidence) < cap  # every occurrence is in its evidence
            and all(e.line < ends.get(e.file, 0) for e in f.evidence)
        )

    before = [f for f in findings if survived(f)]
    if not before or any(f.severity == "error" and not survived(f) for f in findings):
        return findings  # an error the restart did not end: the job's verdict is that error's
    first = root_cause(before) or before[0]  # what the verdict would have been without the restart
    who = f" rank(s) {', '.join(map(str, first.ranks))}" if first.ranks else ""
    note = Finding(
        logs_ids.JOB_RECOVERED,
        "warning",
        f"the job finished after torchrun restarted its worker group ({len(restarted)} restart(s) seen); before the"
        f" restart{who} failed: {first.message[:200]}",
        RECOVERED_FIX,
        first.ranks,
        tuple(restarted) + finished.evidence[-1:],
    )
    return [note, *(dataclasses.replace(f, severity="warning") if f in before else f for f in findings)]
