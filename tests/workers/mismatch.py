"""The ranks all_reduce tensors of different sizes: gloo aborts with a size mismatch."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4 + int(os.environ["RANK"])))
dist.destroy_process_group()
