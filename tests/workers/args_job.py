"""A gloo job whose ranks block (or not) in collectives whose ARGUMENTS tell the story; $MODE says how.
Each rank prints "ready <rank>" before it blocks (or, for the healthy modes, once it loops).

p2p_deadlock: every rank recv()s from its peer first (rank ^ 1), then would send: a deadlock in the code.
batch_deadlock: every rank batch_isend_irecv()s only a recv from its peer, waits, then would send.
ring3: rank r recv()s from (r + 1) % world first: a cycle of 3 with 3 ranks.
reduce_dst: every rank calls reduce() on the same line, each naming itself as dst.
broadcast_src: rank 0 broadcasts with src=0, the others on the same line with src=1.
gather_dst, scatter_src: every rank names itself the root.
pair_recv: 4 ranks, groups [0,1] and [2,3]; each rank recv()s from its pair's other rank by group_src: a deadlock.
pairs: 4 ranks, groups [0,1] and [2,3]; rank 3 skips its pair's all_reduce once and goes on to the world barrier.
uneven_ddp: DDP; rank 1 has fewer batches, leaves the loop (prints "left the loop 1") and waits in the final barrier.
isend_recv: the tutorial's ring step on rank 0 (req = isend to rank 1, then recv from it), while rank 1 sleeps in
its own code: a straggler, though rank 0 stands in recv (its caller holds the isend's handle).
pipeline: healthy two-stage pipeline: rank 0 sends, rank 1 recvs, forever.
subgroups: healthy: pair all_reduces on [0,1] and [2,3], then a world barrier, forever.
ddp: healthy DDP training, forever.
moving_root: healthy: broadcast whose src changes every step, forever.
root_then_hang: broadcast from rank 0 for 6 steps (rank 1 slow: rank 0 stands in it a while each step), then from
rank 1, which sleeps in its own code instead: rank 0 waits in a broadcast at the same frames, now with src=1.
$SLOW_RANK: in the healthy modes, that rank sleeps 0.8 s per step, so the others stand in the collective a while.
"""

import os
import time

import torch
import torch.distributed as dist


def user_step(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def pace(step: int) -> None:
    """A healthy loop's step: "ready" after the first, and a slow rank's nap."""
    if step == 0:
        print(f"ready {rank}", flush=True)
    time.sleep(0.8 if rank == int(os.environ.get("SLOW_RANK", "-1")) else 0.01)


def exchange(t: torch.Tensor, peer: int) -> None:
    ops = [dist.P2POp(dist.irecv, t, peer), dist.P2POp(dist.isend, t.clone(), peer)]
    ops = ops[:1]  # the send is left out: both ranks only receive
    reqs = dist.batch_isend_irecv(ops)
    for req in reqs:
        req.wait()


def ring_step(buf: torch.Tensor, peer: int) -> None:
    send_req = dist.isend(buf.clone(), dst=peer)
    dist.recv(buf, src=peer)
    send_req.wait()


def slow_batch() -> None:
    time.sleep(3600)


def irecv_wait(t: torch.Tensor, peer: int) -> None:
    req = dist.irecv(t, src=peer)
    req.wait()


dist.init_process_group("gloo")
rank, world, mode = dist.get_rank(), dist.get_world_size(), os.environ["MODE"]
peer = rank ^ 1
t = torch.ones(4096)  # 16 KiB a step: more than the sampler's heartbeat floor (1 KiB/s a socket)
dist.all_reduce(t)
pair = None
if mode in ("pairs", "subgroups", "pair_recv"):
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pair = groups[rank // 2]
    dist.barrier()
if mode not in ("pipeline", "subgroups", "ddp", "moving_root", "uneven_ddp"):
    print(f"ready {rank}", flush=True)
if mode == "p2p_deadlock":
    dist.recv(t, src=peer)
    dist.send(t, dst=peer)
elif mode == "batch_deadlock":
    exchange(t, peer)
elif mode == "irecv_deadlock":
    irecv_wait(t, peer)
elif mode == "isend_recv":
    ring_step(t, peer) if rank == 0 else slow_batch()
elif mode == "ring3":
    dist.recv(t, src=(rank + 1) % world)
elif mode == "reduce_dst":
    dist.reduce(t, dst=rank)
elif mode == "broadcast_src":
    dist.broadcast(t, src=0 if rank == 0 else 1)
elif mode == "gather_dst":
    dist.gather(t, [torch.zeros_like(t) for _ in range(world)], dst=rank)
elif mode == "scatter_src":
    dist.scatter(t, [torch.zeros_like(t) for _ in range(world)], src=rank)
elif mode == "pair_recv":
    dist.recv(t, group=pair, group_src=(rank + 1) % 2)
elif mode == "pairs":
    if rank != 3:
        dist.all_reduce(t, group=pair)
    dist.barrier()
elif mode in ("uneven_ddp", "ddp"):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    batches = 10**9 if mode == "ddp" else (3 if rank == 1 else 10**9)
    for step in range(batches):
        model(torch.randn(8, 64)).sum().backward()
        if mode == "ddp" or step == 0:
            pace(step)
    if rank == 1:
        print(f"left the loop {rank}", flush=True)
    dist.barrier()
elif mode == "pipeline":
    step = 0
    while True:
        if rank == 0:
            user_step(dist.send, t, dst=1)
        else:
            user_step(dist.recv, t, src=0)
        pace(step)
        step += 1
elif mode == "subgroups":
    step = 0
    while True:
        dist.all_reduce(t, group=pair)
        dist.barrier()
        pace(step)
        step += 1
elif mode == "root_then_hang":
    for step in range(10**9):
        if rank == 1 and step == 6:
            slow_batch()
        dist.broadcast(t, src=0 if step < 6 else 1)
        pace(step)
elif mode == "moving_root":
    step = 0
    while True:
        dist.broadcast(t, src=step % world)
        pace(step)
        step += 1
