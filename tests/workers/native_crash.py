"""Rank 1 dies in native code or by a signal, after one good all_reduce; how is $CRASH:
segv (ctypes.string_at(0) under faulthandler), abort (os.abort()), bus (a truncated mmap), kill (SIGKILL itself)."""

import ctypes
import faulthandler
import mmap
import os
import signal
import tempfile

import torch
import torch.distributed as dist


def crash(how: str) -> None:
    if how == "segv":
        ctypes.string_at(0)
    elif how == "abort":
        os.abort()
    elif how == "bus":
        with tempfile.TemporaryFile() as f:
            f.truncate(mmap.PAGESIZE)
            m = mmap.mmap(f.fileno(), mmap.PAGESIZE)
            f.truncate(0)
            m[0]
    elif how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def step(t: torch.Tensor) -> None:
    dist.all_reduce(t)
    if dist.get_rank() == 1:
        crash(os.environ.get("CRASH", "segv"))
    dist.all_reduce(t)


faulthandler.enable()
dist.init_process_group("gloo")
step(torch.ones(4))
dist.destroy_process_group()
