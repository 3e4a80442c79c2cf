"""The README's ``train.py``: a healthy gloo job that steps (all_reduce and a little compute) until a file named
``STOP`` appears in its working directory, then every rank exits 0. It takes any arguments (``--lr 3e-4``)."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"ready {rank}", flush=True)
flag = torch.zeros(1)
steps = 0
while True:
    flag.fill_(1.0 if rank == 0 and os.path.exists("STOP") else 0.0)
    dist.all_reduce(flag)  # rank 0 tells every rank when to stop, in the same collective
    steps += 1
    if flag[0] > 0:
        break
    sum(i * i for i in range(20000))
    time.sleep(0.01)
dist.barrier()
print(f"done {rank} after {steps} steps", flush=True)
dist.destroy_process_group()
