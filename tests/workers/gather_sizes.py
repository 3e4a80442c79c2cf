"""Each rank all-gathers its own count of items into a list sized for rank 0's count (a rank-dependent length)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
items = torch.ones(5 if rank == 0 else 4)  # the last batch is short on every rank but rank 0
gathered = [torch.empty(5) for _ in range(world)]
dist.all_gather(gathered, items)
dist.destroy_process_group()
