"""The baseline for bench_smoke: a bare torch.distributed timing loop, no verification, no progress files.

Run under torchrun: ``torchrun --nproc-per-node 2 benchmarks/bare_loop.py OPS SIZES ITERS WARMUP OUT``.
Rank 0 writes {"op@bytes": p50_us} with the same statistic smoke reports (per-iteration max over ranks).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def make(op: str, count: int, rank: int, world: int) -> Callable[[], object]:
    buf = torch.ones(count)
    chunk = max(count // world, 1)
    parts = [torch.zeros(chunk) for _ in range(world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    send, recv, received = torch.ones(chunk * world), torch.zeros(chunk * world), buf.clone()
    calls: dict[str, Callable[[], object]] = {
        "broadcast": lambda: dist.broadcast(buf, 0),
        "reduce": lambda: dist.reduce(buf, 0),
        "all_reduce": lambda: dist.all_reduce(buf),
        "gather": lambda: dist.gather(parts[0], parts if rank == 0 else None, dst=0),
        "all_gather": lambda: dist.all_gather(parts, parts[0]),
        "scatter": lambda: dist.scatter(parts[0], parts if rank == 0 else None, src=0),
        "reduce_scatter": lambda: dist.reduce_scatter(parts[0], parts),
        "all_to_all": lambda: dist.all_to_all_single(recv, send),
        "send_recv": lambda: [
            r.wait()
            for r in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, buf, right), dist.P2POp(dist.irecv, received, left)]
            )
        ],
        "barrier": lambda: dist.barrier(),
    }
    return calls[op]


def main() -> None:
    ops, sizes, iters, warmup, out = (
        sys.argv[1].split(","),
        sys.argv[2].split(","),
        *map(int, sys.argv[3:5]),
        sys.argv[5],
    )
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    report = {}
    for op in ops:
        for size in sizes if op != "barrier" else sizes[:1]:
            call = make(op, max(int(size) // 4, 1) // world * world or world, rank, world)
            times = []
            for i in range(warmup + iters):
                begin = time.perf_counter()
                call()
                if i >= warmup:
                    times.append((time.perf_counter() - begin) * 1e6)
            mine = torch.tensor(times, dtype=torch.float64)
            everyone = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(everyone, mine)
            per_iter = torch.stack(everyone).max(dim=0).values.tolist()
            report[f"{op}@{0 if op == 'barrier' else size}"] = statistics.median(per_iter)
    if rank == 0:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(report, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
