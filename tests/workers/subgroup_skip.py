"""Four gloo ranks in two pairs, each pair with its own group; a few healthy steps (pair all_reduce, world barrier).

SKIP=1: in the last step rank 3 skips its pair's all_reduce and goes on to the world barrier: rank 2 waits in the
pair's all_reduce, ranks 0, 1 and 3 in the barrier, until the gloo timeout (HANG_S, default 60 s).
WORKER_MAIN=1: the job serves torch's control plane itself (worker_main, TORCH_WORKER_SERVER_SOCKET).
NO_PG=1: never creates a process group (imports torch.distributed, sleeps a little, exits).
The ranks write "ready <rank>" to stdout once the healthy steps are done.
"""

import os
import sys
import time
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    if os.environ.get("NO_PG") == "1":
        time.sleep(float(os.environ.get("SLEEP_S", "1")))
        return
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("HANG_S", "60"))))
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pair = pairs[rank // 2]
    t = torch.ones(4)
    steps = int(os.environ.get("STEPS", "3"))
    for step in range(steps + 1):
        last = step == steps
        if last:
            print(f"ready {rank}", flush=True)
            time.sleep(float(os.environ.get("SLEEP_S", "0.5")))
        if not (last and rank == 3 and os.environ.get("SKIP") == "1"):
            dist.all_reduce(t, group=pair)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("WORKER_MAIN") == "1":
        from torch.distributed.elastic.control_plane import worker_main

        context = worker_main()
    else:
        context = nullcontext()
    with context:
        main()
    sys.exit(0)
