"""``ncclcheck env`` analysis: one pure function per check, from a NodeSnapshot to a Check."""

from __future__ import annotations

from collections.abc import Callable

from ncclcheck.analysis.env import gpus, host, ib, ib_gid, net, rdzv, variables, versions
from ncclcheck.analysis.env.context import Context, context
from ncclcheck.analysis.nccl_rules import version_text
from ncclcheck.model.checks import Check, EnvReport
from ncclcheck.model.env import NodeSnapshot

CHECKS: tuple[Callable[[NodeSnapshot, Context], Check], ...] = (
    versions.check_versions,
    gpus.check_gpus,
    ib.check_devices,
    ib_gid.check_gid_index,
    ib.check_memlock,
    ib.check_peermem,
    net.check_interfaces,
    net.check_socket_ifname,
    net.check_gloo,
    rdzv.check_rdzv,
    host.check_shm,
    host.check_hostname,
    host.check_ptrace,
    host.check_iommu,
    variables.check_variables,
)


def analyze(snapshot: NodeSnapshot, host_name: str) -> EnvReport:
    """Run every check over one node's snapshot."""
    ctx = context(snapshot)
    rules = version_text(ctx.nccl) if ctx.nccl else "unknown (assuming NCCL >= 2.28)"
    return EnvReport(
        host=host_name,
        root=snapshot.options.root,
        nccl_rules=rules,
        checks=tuple(check(snapshot, ctx) for check in CHECKS),
    )
