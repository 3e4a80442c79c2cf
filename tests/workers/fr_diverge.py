"""Each process group goes wrong in its own way, then every rank writes its Flight Recorder dump.

Groups: "healthy" (agrees), "op" (rank 1 broadcasts where rank 0 all-reduces), "size" (same bytes,
different shapes, so gloo completes it), "dtype" (float vs int32, same bytes) and, last, the default
group where rank 1 skips an all_reduce. Dumps go to $FR_DIR/pickle/rank<N> and $FR_DIR/json/rank<N>.json.
"""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
out = os.environ["FR_DIR"]
groups = {name: dist.new_group([0, 1], group_desc=name) for name in ("healthy", "op", "size", "dtype")}
t = torch.ones(4, 5)
for _ in range(3):
    dist.all_reduce(t, group=groups["healthy"])
dist.all_reduce(t, group=groups["op"])
pending = [
    dist.all_reduce(t, group=groups["op"], async_op=True)
    if rank == 0
    else dist.broadcast(t, 0, group=groups["op"], async_op=True)
]
dist.all_reduce(torch.ones(4, 5) if rank == 0 else torch.ones(5, 4), group=groups["size"])
dist.all_reduce(torch.ones(4, 5) if rank == 0 else torch.ones(4, 5, dtype=torch.int32), group=groups["dtype"])
dist.barrier()
if rank == 0:
    pending.append(dist.all_reduce(t, async_op=True))  # rank 1 never calls this one
time.sleep(0.5)
c10d = torch._C._distributed_c10d
for kind, blob, name in (
    ("pickle", c10d._dump_fr_trace(True, True, False), f"rank{rank}"),
    ("json", c10d._dump_fr_trace_json(True, False), f"rank{rank}.json"),
):
    os.makedirs(os.path.join(out, kind), exist_ok=True)
    with open(os.path.join(out, kind, name), "wb") as f:
        f.write(blob)
# Exiting would fail the peer's pending ops (gloo then marks them retired): wait until both dumped.
store = dist.distributed_c10d._get_default_store()
store.set(f"dumped{rank}", "1")
store.wait([f"dumped{1 - rank}"])
os._exit(0)  # the mismatched ops would block a clean shutdown
