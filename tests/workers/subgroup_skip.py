"""Gloo ranks in pairs, each pair with its own group; a few healthy steps (pair all_reduce, world barrier), then a
last step chosen by MODE, after "ready <rank>" on stdout and SLEEP_S seconds:

- "" (healthy): the same step again; the job ends cleanly.
- skip: rank 3 skips its pair's all_reduce and goes on to the world barrier: rank 2 waits in the pair's
  all_reduce, ranks 0, 1 and 3 in the barrier, until the gloo timeout (HANG_S, default 60 s).
- op: the world barrier becomes a world all_reduce, which rank 3 calls as a broadcast (same collective #).
- swap (2 ranks, both in groups A and B): rank 0 all-reduces in A then B, rank 1 in B then A: each waits for the other.

DEBUG_SERVER=1: the job starts torch's debug server after init_process_group (a worker server on a TCP port).
WORKER_MAIN=1: the job serves torch's control plane itself (worker_main on TORCH_WORKER_SERVER_SOCKET, which the
worker sets to $THEIR_DIR/rank<N>.sock after its start). NO_PG=1: never creates a process group.
"""

import os
import sys
import time
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist


def last_step(mode: str, rank: int, pair: object, groups: list) -> None:
    t = torch.ones(4)
    if mode == "swap":
        for g in groups if rank == 0 else groups[::-1]:
            dist.all_reduce(t, group=g)
        return
    if not (mode == "skip" and rank == 3):
        dist.all_reduce(t, group=pair)
    if mode == "op":
        dist.broadcast(t, 0) if rank == 3 else dist.all_reduce(t)
    else:
        dist.barrier()


def main() -> None:
    if os.environ.get("NO_PG") == "1":
        time.sleep(float(os.environ.get("SLEEP_S", "1")))
        return
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("HANG_S", "60"))))
    if os.environ.get("DEBUG_SERVER") == "1":  # the job serves torch's debug server itself (its own worker server)
        from torch.distributed.debug import start_debug_server

        start_debug_server(port=0, handlers=[])
    rank, mode = dist.get_rank(), os.environ.get("MODE", "")
    if dist.get_world_size() == 2:
        groups = [dist.new_group([0, 1]), dist.new_group([0, 1])]
        pair = groups[0]
    else:
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        pair = groups[rank // 2]
    t = torch.ones(4)
    for _ in range(int(os.environ.get("STEPS", "3"))):
        dist.all_reduce(t, group=pair)
        dist.barrier()
    print(f"ready {rank}", flush=True)
    time.sleep(float(os.environ.get("SLEEP_S", "0.5")))
    last_step(mode, rank, pair, groups)
    dist.destroy_process_group()


if __name__ == "__main__":
    context = nullcontext()
    if os.environ.get("WORKER_MAIN") == "1":
        from torch.distributed.elastic.control_plane import worker_main

        os.environ["TORCH_WORKER_SERVER_SOCKET"] = os.path.join(
            os.environ["THEIR_DIR"], f"rank{os.environ['RANK']}.sock"
        )
        context = worker_main()
    with context:
        main()
    sys.exit(0)
