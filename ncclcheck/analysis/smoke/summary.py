"""A smoke run's summary from what its launcher saw: results, the hang, why ranks failed or never started."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.nccl import ranks as nccl_ranks
from ncclcheck.analysis.smoke.fingerprint import differences
from ncclcheck.analysis.smoke.progress import first_failure, rank_died
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.logs import ChildFailure, RankLog
from ncclcheck.model.smoke import CONCLUDED, Hang, Launch, OpResult, RankProgress, RunState, SmokeSummary

HANG_FIX = (
    "the culprit rank's stack shows where it is instead of the collective; if every rank is inside it,"
    " run `ncclcheck env` on each node and `ncclcheck logs` on the NCCL logs"
)


def torchrun_report(lines: Iterable[str]) -> LogReport:
    """torchrun's own output read as ``ncclcheck logs`` reads it: its failure table, its errors."""
    return analyse(frame_all(lines, "torchrun.log"))


def transports(logs: Sequence[tuple[str, Iterable[str]]]) -> tuple[RankLog, ...]:
    """Each rank's transport map from the NCCL logs (path, lines) a run left."""
    return nccl_ranks(chain.from_iterable(frame_all(lines, path) for path, lines in logs))


def summarise(
    launch: Launch,
    ranks: tuple[RankProgress, ...],
    results: tuple[OpResult, ...],
    hang: Hang | None,
    errors: tuple[Finding, ...],
    finished: bool,
    rank_logs: tuple[RankLog, ...] = (),
    state: RunState = CONCLUDED,
) -> SmokeSummary:
    """Rank 0 carries every rank's fingerprint once the ranks exchanged them; before that, each rank its own."""
    zero = next((r for r in ranks if r.rank == 0), None)
    prints = (
        zero.job_fingerprints
        if zero and zero.job_fingerprints
        else tuple(r.fingerprint for r in ranks if r.fingerprint)
    )
    findings = errors + differences(prints)
    if hang:
        named = tuple(sorted({s.rank for s in hang.ranks} | set(hang.culprits)))
        findings += (Finding(smoke_ids.SMOKE_HANG, "error", hang.message, HANG_FIX, named, culprits=hang.culprits),)
    elif state == CONCLUDED and not results and not errors:
        findings += (nothing_verified(launch, ranks),)
    return SmokeSummary(
        launch.world_size,
        launch.nodes,
        launch.node_rank,
        launch.backend,
        results,
        hang,
        findings,
        prints,
        rank_logs,
        launch.log_dir,
        finished,
        state,
    )


def nothing_verified(launch: Launch, ranks: Sequence[RankProgress]) -> Finding:
    """A run that ended with no op verified at any size: nothing was tested, which is no pass."""
    seen = f"{len(ranks)} rank(s) wrote progress, none a result" if ranks else "no rank wrote progress"
    return Finding(
        smoke_ids.SMOKE_NOTHING_VERIFIED,
        "error",
        f"no collective was verified: {seen} in {launch.log_dir}",
        "run the smoke ranks through `ncclcheck smoke` (or torchrun with the same --log-dir for every rank), and"
        " read each rank's log there for why it stopped before its first op",
    )


def never_started(launch: Launch, code: int | None, torchrun: LogReport) -> Finding:
    """No rank started: what torchrun's log says is the cause (a taken port, a torch that does not import);
    only when it says nothing is the rendezvous named, as the likely wait."""
    cause = torchrun.root_cause
    log = f"{launch.log_dir}/torchrun.log"
    if cause is not None:
        how = "" if code is None else f" (torchrun exit code {code})"
        return Finding(
            smoke_ids.LAUNCH_FAILED,
            "error",
            f"the ranks never started{how}: {cause.message}; torchrun's output: {log}",
            cause.fix,
            evidence=cause.evidence,
        )
    if launch.nodes == 1:
        why = "no rank reported before the deadline" if code is None else f"torchrun exit code {code}"
        return Finding(
            smoke_ids.LAUNCH_FAILED,
            "error",
            f"the ranks never started ({why}); torchrun's output: {log}",
            "read torchrun's output above; `python -c 'import torch.distributed'` must work in this environment",
        )
    endpoint = f"{launch.master_addr}:{launch.master_port}"
    why = "no rendezvous before the deadline" if code is None else f"torchrun exit code {code}"
    return Finding(
        smoke_ids.LAUNCH_FAILED,
        "error",
        f"the ranks never started ({why}); is the rendezvous {endpoint} reachable and node 0 started?"
        f" torchrun's output: {log}",
        f"run `ncclcheck env --master-addr {launch.master_addr} --master-port {launch.master_port}` on this node",
    )


def rank_failed(
    launch: Launch,
    ranks: tuple[RankProgress, ...],
    failures: Sequence[ChildFailure],
    output_of: dict[int, str],
    stderr_of: dict[int, str | None],
) -> Finding:
    """The rank the others echo, how it died and what it said (``output_of``/``stderr_of`` by local rank)."""
    rank = first_failure(ranks, failures)
    where = next((r for r in ranks if r.rank == rank), None)
    local = where.local_rank if where else (rank or 0) % launch.nproc
    output = "" if where and where.error else output_of.get(local, "")
    death = next((f for f in failures if f.rank == rank), None)
    return rank_died(rank, death, where, output, stderr_of.get(local))


def failed_rows(ranks: tuple[RankProgress, ...], hang: Hang | None, failed: bool) -> tuple[OpResult, ...]:
    """The table's last row: the op and size that hung, or the op a failed rank was in."""
    if hang:
        return (OpResult(hang.op, hang.bytes, 0, "hang", None, None, None, None, 0),)
    if failed and ranks:
        # a rank inside a step knows the op and size; a drill that crashed its rank before the op knows the op only
        # (bytes 0: the row says it never ran); ranks between steps ("done init") say least
        live = [r for r in ranks if not r.ended and r.last_op]
        step = min(live, key=lambda r: {"start": 0, "drill": 1}.get(r.last_event, 2), default=None)
        if step and step.last_op:
            size = step.last_bytes if step.last_event == "start" else 0
            return (OpResult(step.last_op, size, 0, "error", None, None, None, None, 0),)
    return ()
