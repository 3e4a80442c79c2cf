"""A 2-rank gloo job started with torch.multiprocessing.spawn (no torchrun, no RANK in the environment):
rank 0 waits in all_reduce, rank 1 sits in user code. Each rank prints "ready <rank>" first."""

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def load_batch() -> None:
    time.sleep(3600)


def work(index: int, world: int) -> None:
    dist.init_process_group("gloo", rank=index, world_size=world)
    t = torch.ones(16)
    dist.all_reduce(t)
    print(f"ready {index}", flush=True)
    if index == 0:
        dist.all_reduce(t)
    else:
        load_batch()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("PORT", "29611")
    mp.spawn(work, args=(2,), nprocs=2)
