"""A steady 2-rank gloo training-like loop for $DURATION seconds; rank 0 prints "steps/s <rate>"."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1 << 16)
x = torch.randn(256, 256)
dist.barrier()
end, steps = time.monotonic() + float(os.environ.get("DURATION", "10")), 0
start = time.monotonic()
while True:
    x = torch.tanh(x @ x.T / 256)
    dist.all_reduce(t)
    steps += 1
    done = torch.tensor([time.monotonic() >= end], dtype=torch.int32)
    dist.all_reduce(done)  # both ranks stop on the same step
    if done.item():
        break
if dist.get_rank() == 0:
    os.write(1, f"steps/s {steps / (time.monotonic() - start):.2f}\n".encode())  # one write: the ranks share stdout
os.write(1, f"cpu_s {time.process_time():.3f}\n".encode())  # this rank's own CPU (benchmarks subtract it)
dist.destroy_process_group()
