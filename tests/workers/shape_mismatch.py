"""One rank's tensor differs from the others' in a collective; which and how is $ODD (shape, dtype, numel) and $OP."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
odd = rank == dist.get_world_size() - 1
how, op = os.environ.get("ODD", "shape"), os.environ.get("OP", "all_reduce")
t = torch.ones(4, 2)
if odd and how == "shape":
    t = torch.ones(2, 4)
elif odd and how == "dtype":
    t = torch.ones(4, 2, dtype=torch.float64)
elif odd and how == "numel":
    t = torch.ones(int(os.environ.get("NUMEL", "6")))
if op == "all_reduce":
    dist.all_reduce(t)
else:
    dist.all_gather([torch.empty_like(t) for _ in range(dist.get_world_size())], t)
dist.destroy_process_group()
