"""Launched without torchrun (env://): rank 0 hosts the c10d TCPStore. Rank 1 waits on the store for a key
that never comes; the test SIGKILLs rank 0, the store host, once rank 1 is waiting."""

import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
store = dist.distributed_c10d._get_default_store()
if dist.get_rank() == 1:
    print("waiting on the store", flush=True)
    store.get("never-set")
else:
    print("hosting the store", flush=True)
    os.read(sys.stdin.fileno(), 1)  # block until killed (stdin is a pipe nobody writes)
