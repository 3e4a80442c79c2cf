"""The snapshot of one node that ``ncclcheck env`` analyses: every probe's facts plus the options."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.model.gpu import GpuLook
from ncclcheck.probes.envvars import EnvFacts
from ncclcheck.probes.gpu import GpuFacts
from ncclcheck.probes.host import HostFacts
from ncclcheck.probes.ib import IbFacts
from ncclcheck.probes.net import NetFacts
from ncclcheck.probes.rdzv import RdzvFacts
from ncclcheck.probes.slurm import SlurmFacts
from ncclcheck.probes.versions import VersionFacts


@dataclass(frozen=True)
class EnvOptions:
    """What the user told ``ncclcheck env`` on the command line."""

    root: str = "/"
    master_addr: str | None = None
    master_port: str | None = None
    nproc: int | None = None
    nnodes: int | None = None
    try_import: bool = True  # live: a child Python runs `import torch.distributed` (--no-import: it does not)


@dataclass(frozen=True)
class NodeSnapshot:
    """Everything collected on one node; ``rdzv`` is None when no endpoint is known."""

    options: EnvOptions
    versions: VersionFacts
    gpu: GpuFacts
    ib: IbFacts
    net: NetFacts
    host: HostFacts
    env: EnvFacts
    rdzv: RdzvFacts | None
    not_saved: tuple[str, ...] = ()  # under --root: "versions", "environment", "interfaces" the tree lacks
    nvml: GpuLook | None = None  # the GPUs as NVML reads them now (this node only, where PCI shows any)
    slurm: SlurmFacts | None = None  # the SLURM job this node runs in (None: no SLURM_JOB_ID)
