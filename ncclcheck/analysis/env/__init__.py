"""``ncclcheck env`` analysis: one pure function per check, from a NodeSnapshot to a Check."""

from __future__ import annotations

from collections.abc import Callable

from ncclcheck.analysis.env import gpus, host, ib, ib_gid, net, rdzv, timeouts, variables, versions
from ncclcheck.analysis.env.context import Context, context
from ncclcheck.analysis.env.verdict import skip
from ncclcheck.analysis.nccl_rules import version_text
from ncclcheck.model.checks import Check, EnvReport
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids

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
    timeouts.check_timeouts,
)


# The part of a saved tree (env --root) each check needs beyond sysfs and /proc.
NEEDS = {
    env_ids.VERSIONS: "versions",
    env_ids.ENV_VARS: "environment",
    env_ids.ENV_TIMEOUTS: "environment",
    env_ids.NET_INTERFACES: "interfaces",
    env_ids.NET_SOCKET_IFNAME: "interfaces",
    env_ids.NET_GLOO: "interfaces",
}
SAVE_HINT = "save the node with `python3 probes/save_tree.py DIR` there, then `ncclcheck env --root DIR`"


def analyse(snapshot: NodeSnapshot, host_name: str) -> EnvReport:
    """Run every check over one node's snapshot; what a saved tree lacks is skipped, never guessed."""
    ctx = context(snapshot)
    rules = version_text(ctx.nccl) if ctx.nccl else "unknown (assuming NCCL >= 2.28)"
    return EnvReport(
        host=host_name,
        root=snapshot.options.root,
        nccl_rules=rules,
        checks=tuple(_unless_missing(check(snapshot, ctx), snapshot.not_saved) for check in CHECKS),
        not_saved=snapshot.not_saved,
    )


def _unless_missing(result: Check, not_saved: tuple[str, ...]) -> Check:
    part = NEEDS.get(result.id)
    if part is None or part not in not_saved:
        return result
    return skip(result.id, f"{part} not in the saved tree: {SAVE_HINT}")
