"""Rank 1 raises after the first all_reduce; rank 0 waits in the next one."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if int(os.environ["RANK"]) == 1:
    raise RuntimeError("worker bug on rank 1")
dist.all_reduce(t)
dist.destroy_process_group()
