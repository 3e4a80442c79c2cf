"""What each rank's GPU says about a stall (NVML's readings, ``model/gpu.py``).

An NCCL kernel waiting for a peer's data spins in place: the GPU reads about 100 % utilisation at low power (vLLM
#46097, NCCL #2213); compute reads high power too; a GPU with no kernel reads neither. So, while the ranks stand still
at a CUDA synchronisation: every GPU spinning says every rank launched the collective and waits for data (the
transport, or a rank on a GPU not seen here); a rank whose GPU is idle while the others' spin never launched it. A rank
is tied to a GPU by the compute processes NVML lists; ranks sharing a GPU, or a GPU not seen, are not judged by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from ncclcheck.model.findings import Finding
from ncclcheck.model.gpu import GpuLook, GpuReading
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span

Activity = Literal["spinning", "computing", "idle", "busy"]
BUSY_UTIL = 80  # % utilisation from which a kernel runs nearly all the time
IDLE_UTIL = 5  # % below which no kernel runs
SPIN_POWER = 0.45  # a busy GPU under this share of its power limit spins in place (NCCL waits) rather than computes

IDLE_FIX = (
    "that rank never launched the collective the others' kernels wait in: read where it stands (its stack: "
    "`ncclcheck watch`), a path of its code that skips the call, or a wait before it"
)
SPIN_FIX = (
    "every rank launched the collective and its kernel waits for data: a rank whose GPU is not seen here, or the "
    "transport (NCCL_DEBUG=INFO logs: `ncclcheck logs`; `ncclcheck env` on each node; NCCL RAS for the op counts)"
)


def activity(gpu: GpuReading) -> Activity:
    """What a GPU does by its utilisation and power."""
    share = gpu.power_share
    if gpu.util_percent < IDLE_UTIL:
        return "idle"
    if gpu.util_percent >= BUSY_UTIL and share is not None:
        return "spinning" if share < SPIN_POWER else "computing"
    return "busy"


def words(gpu: GpuReading) -> str:
    share = gpu.power_share
    power = f" at {share:.0%} of its power limit" if share is not None else ""
    return f"GPU {gpu.index} {activity(gpu)} ({gpu.util_percent} %{power})"


def of_ranks(look: GpuLook, pids: Mapping[int, int]) -> dict[int, GpuReading]:
    """Each rank's GPU, where it has one of its own: ranks sharing a GPU are left out."""
    owners: dict[int, list[int]] = {}
    for gpu in look.gpus:
        owners[gpu.index] = [pids[p] for p in gpu.pids if p in pids]
    return {ranks[0]: next(g for g in look.gpus if g.index == i) for i, ranks in owners.items() if len(ranks) == 1}


def judge(look: GpuLook, pids: Mapping[int, int], waiting: Sequence[int]) -> tuple[Finding, ...]:
    """The GPUs of ``waiting`` ranks (standing still at a CUDA synchronisation or in a collective), where each has its
    own: the idle ones among spinning ones never launched the collective; all spinning waits on data."""
    mine = of_ranks(look, pids)
    seen = {r: mine[r] for r in waiting if r in mine}
    if len(seen) < 2 or len(seen) < len(waiting):
        return ()
    kinds = {r: activity(g) for r, g in seen.items()}
    idle = sorted(r for r, k in kinds.items() if k == "idle")
    spinning = sorted(r for r, k in kinds.items() if k == "spinning")
    said = "; ".join(f"rank {r}: {words(g)}" for r, g in sorted(seen.items()))
    if idle and spinning and len(idle) + len(spinning) == len(seen) and len(idle) < len(spinning):
        message = (
            f"rank {span(idle)}'s GPU is idle while the other ranks' GPUs spin in place ({said}): rank "
            f"{span(idle)} never launched the collective the others' kernels wait in"
        )
        return (
            Finding(
                watch_ids.GPU_IDLE_RANK, "error", message, IDLE_FIX, ranks=tuple(sorted(seen)), culprits=tuple(idle)
            ),
        )
    if len(spinning) == len(seen):
        message = (
            f"every rank's GPU spins in place ({said}): each launched the collective and its kernel waits for data"
        )
        return (Finding(watch_ids.GPU_SPINNING, "warning", message, SPIN_FIX, ranks=tuple(sorted(seen))),)
    return ()
