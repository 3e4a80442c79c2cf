"""A gloo job that gets stuck (or not) the way $MODE says; each rank prints "ready <rank>" first.

op: rank 0 all_reduce, the others broadcast.  order: the same two collectives in opposite orders.
straggler: rank $STUCK_RANK (default: the last) sits in user code (slow_batch) while the others wait in all_reduce.
wait: the last rank sleeps before the all_reduce (the test SIGSTOPs or SIGKILLs it); the others sleep in user code.
healthy: every rank loops over all_reduce, a little compute and a 10-ms pause forever (about 80 steps/s).
uneven: healthy, but the last rank takes 0.8 s longer per step (the others wait for it in all_reduce, and finish it).
finish: healthy for $FINISH_AFTER seconds, then every rank exits with $EXIT_CODE (rank $FAIL_RANK with 1, if set).
spin: every rank computes inside one long C call (as a CUDA sync spins on a hung NCCL kernel).
early: rank 0 exits 0 right after "ready"; the others fail in their next all_reduce $EARLY_AFTER s later (8).
own-error: rank 0 exits 0 right after "ready" (its work done); the others then fail of their own (a ValueError).
restart: on torchrun's first attempt the last rank exits with 1 after "ready"; after the restart, healthy.
$CHATTY=1: every rank also runs a thread that prints a heartbeat line 5 times a second, whatever the main
thread does (a logging thread, a metrics exporter, tqdm).
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def slow_batch() -> None:
    time.sleep(3600)


def train_step(t: torch.Tensor) -> None:
    dist.all_reduce(t)


def heartbeat(rank: int) -> None:
    beats = 0
    while True:
        beats += 1
        print(f"rank {rank} heartbeat {beats}", flush=True)
        time.sleep(0.2)


dist.init_process_group("gloo")
rank, world, mode = dist.get_rank(), dist.get_world_size(), os.environ["MODE"]
last = world - 1
t = torch.ones(1024)
dist.all_reduce(t)
if os.environ.get("CHATTY") == "1":
    threading.Thread(target=heartbeat, args=(rank,), daemon=True).start()
print(f"ready {rank}", flush=True)
if mode == "op":
    train_step(t) if rank == 0 else dist.broadcast(t, 0)
elif mode == "order":
    if rank == 0:
        dist.all_reduce(t)
        dist.broadcast(t, 0)
    else:
        dist.broadcast(t, 0)
        dist.all_reduce(t)
elif mode == "straggler":
    train_step(t) if rank != int(os.environ.get("STUCK_RANK", last)) else slow_batch()
elif mode == "restart" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    if rank == last:
        time.sleep(1.5)
        os._exit(1)
    slow_batch()
elif mode == "early":
    if rank == 0:
        print("rank 0 leaves the loop early", flush=True)
        os._exit(0)
    time.sleep(float(os.environ.get("EARLY_AFTER", "8")))
    train_step(t)  # its peer is gone: gloo raises, the rank fails
elif mode == "own-error":
    if rank == 0:
        os._exit(0)
    time.sleep(1)
    raise ValueError(f"rank {rank}: a batch with no labels")
elif mode == "spin":
    sum(range(10**13))
elif mode == "wait":
    slow_batch()
elif mode in ("healthy", "uneven", "finish", "restart"):
    end = time.monotonic() + float(os.environ.get("FINISH_AFTER", "inf"))
    while True:
        t.fill_(1.0 if time.monotonic() >= end else 0.0)  # the all_reduce tells every rank when one is done
        train_step(t)
        if t[0] > 0:
            break
        sum(i * i for i in range(20000))
        time.sleep(0.01)  # a step's pace (the rest of a step: not a spin that takes every core the machine has)
        if mode == "uneven" and rank == last:
            time.sleep(0.8)
    dist.barrier()
    code = 1 if os.environ.get("FAIL_RANK") == str(rank) else int(os.environ.get("EXIT_CODE", "0"))
    print(f"done {rank}", flush=True)
    sys.stdout.flush()
    os._exit(code)
