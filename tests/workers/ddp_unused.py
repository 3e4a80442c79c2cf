"""A DDP model with a parameter that gets no gradient (find_unused_parameters off): the 2nd step fails."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


dist.init_process_group("gloo")
model = DistributedDataParallel(Model())
for _ in range(2):
    model(torch.ones(2, 4)).sum().backward()
dist.destroy_process_group()
