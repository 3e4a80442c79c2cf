"""Rank 2 is SIGKILLed (as the OOM killer would) after the first all_reduce; the others then fail in the next.

Run under torchrun with a slow ``--monitor-interval`` the agent sees all three failures at once, with one
timestamp, and its "first observed failure" names rank 0: the echo, not the cause.
"""

import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if int(os.environ["RANK"]) == 2:
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(t)
dist.destroy_process_group()
