"""Rank 1's loader thread raises; rank 1 then waits forever on the queue it should have filled, so it never
reaches the next all_reduce and the others time out (gloo, 5 s)."""

import datetime
import queue
import threading

import torch
import torch.distributed as dist


def load(batches: queue.Queue, rank: int) -> None:
    for step in range(3):
        if rank == 1 and step == 1:
            raise ValueError(f"corrupt shard 7 at step {step}")
        batches.put(torch.ones(4) * step)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
batches: queue.Queue = queue.Queue()
threading.Thread(target=load, args=(batches, rank), name="loader").start()
for _ in range(3):
    t = batches.get()
    dist.all_reduce(t)
dist.destroy_process_group()
