"""A gloo training-like loop that runs, but maybe slowly, the way $MODE says; each rank prints "ready <rank>" first.

Every rank computes for $STEP_S seconds a step (its main thread busy: a matmul loop until the step's time is up, so
that a 2-core machine shared by the ranks does not change a step's length; asleep for that time where $WORK=sleep, so
that a suite running beside it keeps its cores), then all_reduces a small tensor.
compute: the ranks in $SLOW_RANKS (default: the last) compute $FACTOR times as long (3).
data: the ranks in $SLOW_RANKS wait $FACTOR times the step for their DataLoader (its dataset sleeps: idle, not busy).
checkpoint: rank 0 writes a checkpoint once, after $CKPT_AFTER s, taking $CKPT_S seconds (3), then goes on balanced.
vary: balanced, but every rank's step takes the same varying time (0.5x..2x the step, changing each step).
warmup: the ranks in $SLOW_RANKS take $WARMUP_S seconds longer on the first step (a compile), then balanced.
mixed: warmup, then vary, and checkpoint.
healthy: balanced.
tpdp: four ranks, tensor-parallel groups 0-1 and 2-3, data-parallel groups 0,2 and 1,3: each step computes, then
  all_reduces in its tp group, then in its dp group; the ranks in $SLOW_RANKS (default 1; empty: none) compute
  $FACTOR times as long.
pipeline: four stages one after the other: each step's forward receives from the stage before, computes and sends to
  the next; its backward the other way; the ranks in $SLOW_RANKS (default 2; empty: none) compute $FACTOR times as
  long.
pipeline-data: a balanced pipeline whose first stage loads its data by design: half its forward in its DataLoader
  (asleep), half computing, where the other stages compute.
Runs for $DURATION seconds (default: until killed); rank 0 prints "steps/s <rate>" and each rank "cpu_s <s>" at the end.
"""

import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

MODE = os.environ.get("MODE", "compute")
STEP_S = float(os.environ.get("STEP_S", "0.1"))
FACTOR = float(os.environ.get("FACTOR", "3"))
DURATION = float(os.environ.get("DURATION", "0")) or float("inf")


def compute(seconds: float) -> None:
    """Busy for ``seconds`` of wall time; asleep in it where $WORK is "sleep"."""
    if os.environ.get("WORK") == "sleep":
        time.sleep(seconds)
        return
    x = torch.randn(64, 64)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = torch.tanh(x @ x.T / 64)


class Slow(Dataset):  # type: ignore[type-arg]
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.seconds)  # storage that is slow for this rank's shard
        return torch.ones(1)


def write_checkpoint(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        torch.save(torch.randn(256, 256), os.devnull)


def tpdp(rank: int, slow: set[int]) -> None:
    """Steps of a tp x dp = 2 x 2 job until rank 0 says stop (its flag reaches every rank through both groups)."""
    tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    t, start = torch.ones(1 << 10), time.monotonic()
    dist.barrier()
    print(f"ready {rank}", flush=True)
    while True:
        compute(STEP_S * (FACTOR if rank in slow else 1))
        t.zero_()
        t[0] = float(rank == 0 and time.monotonic() - start >= DURATION)
        dist.all_reduce(t, group=tp)  # the tensor-parallel all_reduce
        dist.all_reduce(t, group=dp)  # the data-parallel all_reduce
        if t[0] > 0:
            return


def tp(rank: int, slow: set[int]) -> None:
    """Steps of two tensor-parallel groups of two (0+1, 2+3) that never synchronise with each other: each group's
    first rank says stop for its group when the time is up."""
    if os.environ.get("SUBGROUPS"):  # the same groups as torch's new_subgroups makes them (through new_group)
        group, _ = dist.new_subgroups(2)
    else:
        group = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    t, start = torch.ones(1 << 10), time.monotonic()
    dist.barrier()
    print(f"ready {rank}", flush=True)
    while True:
        compute(STEP_S * (FACTOR if rank in slow else 1))
        t.zero_()
        t[0] = float(rank % 2 == 0 and time.monotonic() - start >= DURATION)
        dist.all_reduce(t, group=group)  # the tensor-parallel all_reduce, the only collective of a step
        if t[0] > 0:
            return


def pipeline(rank: int, world: int, slow: set[int]) -> None:
    """Steps of a pipeline of ``world`` stages until stage 0 says stop (its flag goes down and comes back)."""
    step = STEP_S * (FACTOR if rank in slow else 1)
    loader = iter(DataLoader(Slow(STEP_S / 2), batch_size=None)) if MODE == "pipeline-data" and rank == 0 else None
    act, grad, start = torch.zeros(1 << 10), torch.zeros(1 << 10), time.monotonic()
    dist.barrier()
    print(f"ready {rank}", flush=True)
    while True:
        if rank == 0:
            act[0] = float(time.monotonic() - start >= DURATION)
        else:
            dist.recv(act, rank - 1)  # the forward from the stage before
        if loader is not None:
            next(loader)  # the first stage's input: by design, half its forward
        compute(step / 2 if loader is not None else step)
        if rank < world - 1:
            dist.send(act, rank + 1)
            dist.recv(grad, rank + 1)  # the backward from the stage after
        else:
            grad[0] = act[0]
        compute(step)
        if rank > 0:
            dist.send(grad, rank - 1)
        if grad[0] > 0:
            return


def main() -> None:
    dist.init_process_group("gloo")
    if MODE in ("tpdp", "tp", "pipeline", "pipeline-data"):
        rank, world = dist.get_rank(), dist.get_world_size()
        default = {"tpdp": "1", "tp": "1", "pipeline": "2"}.get(MODE, "")
        slow = {int(r) for r in os.environ.get("SLOW_RANKS", default).split(",") if r}
        if MODE == "tpdp":
            tpdp(rank, slow)
        elif MODE == "tp":
            tp(rank, slow)
        else:
            pipeline(rank, world, slow)
        os.write(1, f"cpu_s {time.process_time():.3f}\n".encode())
        dist.destroy_process_group()
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = {int(r) for r in os.environ.get("SLOW_RANKS", str(world - 1)).split(",") if r}
    t = torch.ones(1 << 10)
    loader = None
    if MODE == "data":
        wait = STEP_S * FACTOR if rank in slow else 0.0
        loader = iter(DataLoader(Slow(wait), batch_size=None)) if wait else None
    dist.barrier()
    print(f"ready {rank}", flush=True)
    start, steps, written = time.monotonic(), 0, False
    while True:
        step = STEP_S
        if MODE == "compute" and rank in slow:
            step = STEP_S * FACTOR
        elif MODE in ("vary", "mixed") and steps > 0:
            step = STEP_S * (0.5 + 1.5 * ((steps * 7919) % 13) / 12)  # the same on every rank
        if MODE in ("warmup", "mixed") and steps == 0 and rank in slow:
            step = STEP_S + float(os.environ.get("WARMUP_S", "4"))
        if loader is not None:
            next(loader)
        compute(step)
        if (
            MODE in ("checkpoint", "mixed")
            and rank == 0
            and not written
            and time.monotonic() - start > float(os.environ.get("CKPT_AFTER", "4"))
        ):
            write_checkpoint(float(os.environ.get("CKPT_S", "3")))
            written = True
        t.zero_()
        t[0] = float(rank == 0 and time.monotonic() - start >= DURATION)  # rank 0 says when: all stop on one step
        dist.all_reduce(t)
        steps += 1
        if t[0] > 0:
            break
    if rank == 0:
        os.write(1, f"steps/s {steps / (time.monotonic() - start):.3f}\n".encode())
    os.write(1, f"cpu_s {time.process_time():.3f}\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
