"""A 2-rank gloo job that gets stuck (or not) the way $MODE says; each rank prints "ready <rank>" first.

op: rank 0 all_reduce, rank 1 broadcast.  order: the same two collectives in opposite orders.
straggler: rank 1 sits in user code (slow_batch) while rank 0 waits in all_reduce.
wait: rank 1 sleeps before the all_reduce (the test SIGSTOPs or SIGKILLs it); rank 0 sleeps in user code.
healthy: both loop over all_reduce and a little compute forever.
"""

import os
import time

import torch
import torch.distributed as dist


def slow_batch() -> None:
    time.sleep(3600)


def train_step(t: torch.Tensor) -> None:
    dist.all_reduce(t)


dist.init_process_group("gloo")
rank, mode = dist.get_rank(), os.environ["MODE"]
t = torch.ones(1024)
dist.all_reduce(t)
print(f"ready {rank}", flush=True)
if mode == "op":
    train_step(t) if rank == 0 else dist.broadcast(t, 0)
elif mode == "order":
    if rank == 0:
        dist.all_reduce(t)
        dist.broadcast(t, 0)
    else:
        dist.broadcast(t, 0)
        dist.all_reduce(t)
elif mode == "straggler":
    train_step(t) if rank == 0 else slow_batch()
elif mode == "wait":
    slow_batch()
elif mode == "healthy":
    while True:
        train_step(t)
        sum(i * i for i in range(20000))
