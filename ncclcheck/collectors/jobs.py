"""Find the rank processes of torch distributed jobs on this node (psutil and /proc, read-only).

Two kinds of rank:
- A process with RANK and WORLD_SIZE in its environment (torchrun, torch.distributed.launch, srun and
  mpirun wrappers set them). Dataloader workers and other children inherit that environment: a
  process whose parent carries the same RANK is not a rank.
- A child of ``torch.multiprocessing.spawn`` (``collectors.spawn_jobs``): no RANK in its environment,
  the rank is the spawn index.
Reading another user's environment needs root or the same user; those processes are skipped.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict

import psutil

from ncclcheck.collectors.processes import cwd_of, environ, script_of, started_of
from ncclcheck.collectors.spawn_jobs import spawn_jobs
from ncclcheck.model.watch import Job, RankProc
from ncclcheck.probes._sysfs import parse_int

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torchx", "srun", "mpirun")
_Member = tuple[RankProc, dict[str, str], "psutil.Process | None"]


def discover(pid: int | None = None) -> tuple[Job, ...]:
    """Every job with ranks on this node; with ``pid``, the job that pid belongs to: one of its ranks (its
    siblings are found too), their launcher, or a process above them (a wrapper script, srun)."""
    jobs = _env_jobs() + spawn_jobs()
    if pid is None:
        return jobs
    return tuple(j for j in jobs if _holds(j, pid))


def launcher_waiting(pid: int) -> bool:
    """Whether ``pid`` is a live launcher (torchrun, srun, ...) with no rank of a job under it yet: its ranks are
    still to come (it is starting, or waiting in its rendezvous)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and _is_launcher(proc)
    except psutil.Error:
        return False


def wait_for_ranks(pid: int, timeout_s: float, whole_s: float = 10.0, step_s: float = 0.2) -> tuple[Job, ...]:
    """The job under launcher ``pid`` once its ranks exist here: all of this node's, or those that came within
    ``whole_s`` of the first; () when none came within ``timeout_s`` or the launcher ended."""
    deadline = time.monotonic() + timeout_s
    first: float | None = None
    while True:
        jobs = discover(pid)
        now = time.monotonic()
        if jobs:
            first = first if first is not None else now
            whole = len(jobs[0].ranks) >= len(jobs[0].expected_local())
            if whole or now - first >= whole_s or now >= deadline:
                return jobs
        elif now >= deadline or not launcher_waiting(pid):
            return ()
        time.sleep(step_s)


def pick(jobs: tuple[Job, ...], wanted: str) -> tuple[Job, ...]:
    """The jobs whose id is ``wanted``, else those whose id starts with it."""
    exact = tuple(j for j in jobs if j.id == wanted)
    return exact or tuple(j for j in jobs if j.id.startswith(wanted))


def _holds(job: Job, pid: int) -> bool:
    if pid == job.launcher_pid or any(r.pid == pid for r in job.ranks):
        return True
    for rank in job.ranks:
        try:
            if any(p.pid == pid for p in psutil.Process(rank.pid).parents()):
                return True
        except psutil.Error:
            continue
    return False


def _env_jobs() -> tuple[Job, ...]:
    found: dict[str, list[_Member]] = defaultdict(list)
    host = socket.gethostname()
    for proc in psutil.process_iter():
        got = _rank(proc, host)
        if got:
            rank, env, launcher = got
            found[_job_id(env, launcher, rank)].append(got)
    return tuple(_job(job_id, members) for job_id, members in sorted(found.items()))


def _rank(proc: psutil.Process, host: str) -> _Member | None:
    try:
        env = proc.environ()
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        parent = proc.parent()
        if parent is not None and environ(parent).get("RANK") == env["RANK"]:
            return None  # a dataloader worker or other child of a rank
        rank = RankProc(
            proc.pid,
            int(env["RANK"]),
            parse_int(env.get("LOCAL_RANK")),
            int(env["WORLD_SIZE"]),
            parse_int(env.get("LOCAL_WORLD_SIZE")),
            parse_int(env.get("GROUP_RANK")),
            host,
            " ".join(proc.cmdline())[:300],
            parse_int(env.get("MASTER_PORT")),
        )
        launcher = parent if parent is not None and _is_launcher(parent) else None
        return rank, env, launcher
    except (psutil.Error, ValueError, OSError):
        return None


def _is_launcher(proc: psutil.Process) -> bool:
    try:
        return any(name in " ".join(proc.cmdline()) for name in LAUNCHERS)
    except psutil.Error:
        return False


def _job_id(env: dict[str, str], launcher: psutil.Process | None, rank: RankProc) -> str:
    if env.get("TORCHELASTIC_RUN_ID") and env["TORCHELASTIC_RUN_ID"] != "none":
        return env["TORCHELASTIC_RUN_ID"]
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return f"pid{launcher.pid if launcher else rank.pid}"


def _job(job_id: str, members: list[_Member]) -> Job:
    ranks = tuple(sorted((m[0] for m in members), key=lambda r: r.rank))
    env = members[0][1]
    nodes = parse_int(env.get("GROUP_WORLD_SIZE")) or parse_int(env.get("SLURM_NNODES"))
    launchers = {m[2].pid: m[2] for m in members if m[2] is not None}
    launcher = launchers[min(launchers)] if launchers else None
    first = min(members, key=lambda m: m[0].rank)
    orphaned = launcher is None and all(
        "TORCHELASTIC_RESTART_COUNT" in m[1] and _under_init(m[0].pid) for m in members
    )  # torchrun's ranks, reparented: not a wrapper script between torchrun and the ranks, which is no orphan
    return Job(
        job_id,
        max(r.world_size for r in ranks),
        nodes,
        launcher.pid if launcher else None,
        ranks,
        script=script_of(first[0].cmdline),
        cwd=cwd_of(first[0].pid),
        started=started_of([launcher.pid] if launcher else [r.pid for r in ranks]),
        orphaned=orphaned,
        slurm_job=env.get("SLURM_JOB_ID") or None,
    )


def _under_init(pid: int) -> bool:
    """Whether a process's parent is init or a subreaper (systemd): what an orphan is handed to."""
    try:
        parent = psutil.Process(pid).parent()
        return parent is not None and (parent.pid == 1 or parent.name() in ("systemd", "init"))
    except psutil.Error:
        return False
