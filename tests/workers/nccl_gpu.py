"""Real NCCL hangs with several ranks on one GPU, for ``make gpu-check`` (tools/gpu_check.py) and the gpu tier.

Each rank takes a different NCCL_HOSTID, so NCCL takes the ranks for separate hosts and skips its duplicate-GPU check
(``../shared/reference/nccl_one_gpu.md``): real communicators on one GPU, over NCCL's socket transport. BACKEND=gloo
runs the same code on CPU (the dry run where there is no GPU). MODE picks the hang; every rank prints "ready N" once
its communicator is up (three all-reduces done), then:
  skip      rank 1 skips an all_reduce; the others wait at .item() (a CUDA synchronisation)
  mismatch  rank 0 all_reduce, rank 1 broadcast of another size, then .item()
  p2p       both ranks recv from the other first
  dies      rank 1 exits with code 3; the others wait in all_reduce, then .item()
  before    rank 1 sleeps in Python before the all_reduce; the others wait at .item()
  sleep     rank 1 queues torch.cuda._sleep (about a minute) before its all_reduce: its collective cannot start
  newgroup  rank 1 skips the first all_reduce of a new group (NCCL connects a new communicator lazily, at its first
            collective: rank 0 may block inside the call, its Flight Recorder entry never launched)
  poll      rank 1 computes in a loop before its all_reduce; rank 0 busy-polls its async all_reduce (the stacks of
            both: a busy main thread standing at one line, as NCCL's at a CUDA synchronisation)
  healthy   two hundred all_reduces, then a clean exit
"""

from __future__ import annotations

import datetime
import os
import time

RANK = int(os.environ.get("RANK", "0"))
os.environ.setdefault("NCCL_HOSTID", f"ncclcheck-gpu-check-{RANK}")  # before NCCL reads it at init

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MODE = os.environ.get("MODE", "healthy")
BACKEND = os.environ.get("BACKEND", "nccl")
FOREVER = 3600
SLEEP_CYCLES = int(60 * 2e9)  # about a minute at an H100's ~2 GHz


def main() -> None:
    gpu = BACKEND == "nccl"
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(0)
    timeout = datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT_S", "300")))
    dist.init_process_group(BACKEND, timeout=timeout)
    t = torch.ones(1 << 20, device=device)
    for _ in range(3):
        dist.all_reduce(t)
    if gpu:
        torch.cuda.synchronize()
    print(f"ready {RANK}", flush=True)
    other = 1 - RANK if dist.get_world_size() == 2 else (RANK + 1) % dist.get_world_size()
    if MODE == "skip":
        if RANK != 1:
            dist.all_reduce(t)
        print(t.sum().item(), flush=True)
    elif MODE == "mismatch":
        if RANK == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(torch.ones(1 << 10, device=device), 0)
        print(t.sum().item(), flush=True)
    elif MODE == "p2p":
        r = torch.zeros_like(t)
        dist.recv(r, other)
        dist.send(t, other)
        print(r.sum().item(), flush=True)
    elif MODE == "dies":
        if RANK == 1:
            os._exit(3)
        dist.all_reduce(t)
        print(t.sum().item(), flush=True)
    elif MODE == "before":
        if RANK == 1:
            time.sleep(FOREVER)
        dist.all_reduce(t)
        print(t.sum().item(), flush=True)
    elif MODE == "newgroup":  # rank 1 skips the first collective of a new group: rank 0 waits in its set-up
        pair = dist.new_group([0, 1])
        if RANK != 1:
            dist.all_reduce(t, group=pair)
        print(t.sum().item(), flush=True)
    elif MODE == "poll":  # the same shape on any backend: rank 0 spins on its collective, rank 1 computes on
        if RANK == 1:
            n = 0
            while n >= 0:  # one line, a busy main thread: what a long kernel before the collective looks like
                n += 1
        done = getattr(dist.all_reduce(t, async_op=True), "is_completed")  # noqa: B009
        while not done():  # a busy wait no stack or statement says is one: NCCL's spin inside .item() on a GPU
            pass
        print(t.sum().item(), flush=True)
    elif MODE == "sleep":
        if RANK == 1 and gpu:
            torch.cuda._sleep(SLEEP_CYCLES)
        dist.all_reduce(t)
        print(t.sum().item(), flush=True)
    else:
        for _ in range(200):  # a count, not a clock: every rank makes the same calls
            dist.all_reduce(t)
        if gpu:
            torch.cuda.synchronize()
    time.sleep(1 if MODE == "healthy" else FOREVER)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
