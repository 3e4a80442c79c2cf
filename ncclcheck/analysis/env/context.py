"""Facts several checks share: the effective environment, the NCCL version, the job's shape."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ncclcheck.analysis.nccl_rules import Version, decode_version
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.probes._sysfs import parse_int


@dataclass(frozen=True)
class Context:
    """Derived once per snapshot; ``multi_node`` is None when the job's shape is unknown."""

    env: Mapping[str, str]
    sources: Mapping[str, str]
    nccl: Version | None
    multi_node: bool | None
    local_ranks: int | None


def context(snapshot: NodeSnapshot) -> Context:
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for var in snapshot.env.effective:
        if var.name not in env:
            env[var.name] = var.value
            sources[var.name] = var.source if var.line is None else f"{var.source}:{var.line}"
    return Context(
        env=MappingProxyType(env),
        sources=MappingProxyType(sources),
        nccl=nccl_version(snapshot),
        multi_node=multi_node(snapshot, env),
        local_ranks=snapshot.options.nproc or parse_int(env.get("LOCAL_WORLD_SIZE")),
    )


def nccl_version(snapshot: NodeSnapshot) -> Version | None:
    """The runtime NCCL: the first loadable libnccl, else the nvidia-nccl wheel's version."""
    for lib in snapshot.versions.nccl_libs:
        if lib.version_code is not None:
            return decode_version(lib.version_code)
    wheel = snapshot.versions.nccl_wheel
    if wheel:
        parts = wheel.split("==", 1)[1].split(".")
        if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            return int(parts[0]), int(parts[1]), int(parts[2])
    return None


def multi_node(snapshot: NodeSnapshot, env: Mapping[str, str]) -> bool | None:
    """Whether ranks on other nodes join this job: from flags, launcher variables or MASTER_ADDR."""
    if snapshot.options.nnodes is not None:
        return snapshot.options.nnodes > 1
    world, local = parse_int(env.get("WORLD_SIZE")), parse_int(env.get("LOCAL_WORLD_SIZE"))
    if world is not None and local is not None:
        return world > local
    for name in ("GROUP_WORLD_SIZE", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "PET_NNODES"):
        nodes = parse_int(env.get(name, "").split(":")[-1])
        if nodes is not None:
            return nodes > 1
    rdzv = snapshot.rdzv
    if rdzv is not None and rdzv.resolved and not rdzv.local:
        return True
    return None


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return False


def is_link_local(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_link_local
    except ValueError:
        return False
