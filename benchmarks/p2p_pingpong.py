"""Two ranks trading a small tensor $ROUNDS times (send/recv, and isend/irecv with wait): rank 0 prints the seconds."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, rounds = dist.get_rank(), int(os.environ.get("ROUNDS", "5000"))
t = torch.ones(8)
peer = 1 - rank
dist.barrier()
begin = time.perf_counter()
for _ in range(rounds):
    if rank == 0:
        dist.send(t, peer)
        dist.irecv(t, peer).wait()
    else:
        dist.recv(t, peer)
        dist.isend(t, peer).wait()
elapsed = time.perf_counter() - begin
if rank == 0:
    print(f"seconds {elapsed:.6f}", flush=True)
dist.destroy_process_group()
