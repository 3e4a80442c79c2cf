"""Find the rank processes of torch distributed jobs on this node, from their environment (psutil).

A rank process has RANK and WORLD_SIZE in its environment (torchrun, torch.distributed.launch, srun
and mpirun wrappers set them). Dataloader workers and other children inherit that environment: a
process whose parent carries the same RANK is not a rank. Reading another user's environment needs
root or the same user; those processes are skipped.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Iterable

import psutil

from ncclcheck.model.watch import Job, RankProc

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torchx", "srun", "mpirun")


def discover(pid: int | None = None) -> tuple[Job, ...]:
    """Every job with ranks on this node; with ``pid``, only the job holding that rank or launcher process."""
    found: dict[str, list[tuple[RankProc, dict[str, str], int | None]]] = defaultdict(list)
    host = socket.gethostname()
    for proc in _candidates(pid):
        got = _rank(proc, host)
        if got:
            rank, env, launcher = got
            found[_job_id(env, launcher, rank)].append(got)
    return tuple(_job(job_id, members) for job_id, members in sorted(found.items()))


def _candidates(pid: int | None) -> Iterable[psutil.Process]:
    if pid is None:
        return psutil.process_iter()
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _rank(proc: psutil.Process, host: str) -> tuple[RankProc, dict[str, str], int | None] | None:
    try:
        env = proc.environ()
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        parent = proc.parent()
        if parent is not None and _env(parent).get("RANK") == env["RANK"]:
            return None  # a dataloader worker or other child of a rank
        rank = RankProc(
            proc.pid, int(env["RANK"]), _int(env.get("LOCAL_RANK")), int(env["WORLD_SIZE"]),
            _int(env.get("LOCAL_WORLD_SIZE")), _int(env.get("GROUP_RANK")), host,
            " ".join(proc.cmdline())[:300],
        )  # fmt: skip
        launcher = parent.pid if parent is not None and _is_launcher(parent) else None
        return rank, env, launcher
    except (psutil.Error, ValueError, OSError):
        return None


def _env(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def _is_launcher(proc: psutil.Process) -> bool:
    try:
        return any(name in " ".join(proc.cmdline()) for name in LAUNCHERS)
    except psutil.Error:
        return False


def _job_id(env: dict[str, str], launcher: int | None, rank: RankProc) -> str:
    if env.get("TORCHELASTIC_RUN_ID") and env["TORCHELASTIC_RUN_ID"] != "none":
        return env["TORCHELASTIC_RUN_ID"]
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return f"pid{launcher or rank.pid}"


def _job(job_id: str, members: list[tuple[RankProc, dict[str, str], int | None]]) -> Job:
    ranks = tuple(sorted((m[0] for m in members), key=lambda r: r.rank))
    env = members[0][1]
    nodes = _int(env.get("GROUP_WORLD_SIZE")) or _int(env.get("SLURM_NNODES"))
    launchers = {m[2] for m in members if m[2] is not None}
    return Job(job_id, max(r.world_size for r in ranks), nodes, min(launchers) if launchers else None, ranks)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
