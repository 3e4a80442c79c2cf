"""``host.shm``, ``host.hostname``, ``host.ptrace``, ``host.iommu``: node traits that break NCCL or ncclcheck."""

from __future__ import annotations

from ncclcheck.analysis.env.context import Context, is_loopback
from ncclcheck.analysis.env.ib import used_ports
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids

MIB = 1024 * 1024
DOCKER_SHM = 64 * MIB


def _mib(size: int | None) -> str:
    return "?" if size is None else f"{size / MIB:.0f} MiB"


def check_shm(snapshot: NodeSnapshot, ctx: Context) -> Check:
    shm = snapshot.host.shm
    if not shm.exists and snapshot.options.root != "/":
        return skip(env_ids.HOST_SHM, f"{shm.path} is not in the copied tree")
    fix = "docker run --shm-size=1g (or more); Kubernetes: mount an emptyDir {medium: Memory} at /dev/shm"
    if not shm.exists or not shm.writable:
        return conclude(
            env_ids.HOST_SHM,
            "",
            [
                fail(
                    f"{shm.path} is {'missing' if not shm.exists else 'not writable'}:"
                    " NCCL's SHM transport and proxy cannot create segments",
                    fix,
                )
            ],
        )
    size, free = shm.size_bytes or 0, shm.free_bytes or 0
    local = ctx.local_ranks or max(len(snapshot.gpu.gpus), 1)
    issues: list[Issue] = []
    if size <= DOCKER_SHM and local > 1:
        issues.append(
            fail(
                f"/dev/shm is {_mib(size)} (the container default) with {local} local ranks:"
                " 'failed to extend /dev/shm/nccl-...' or bus errors",
                fix,
            )
        )
    elif size < 1024 * MIB:
        issues.append(warn(f"/dev/shm is only {_mib(size)}", fix))
    if size and free < size // 4:
        stale = ", ".join(f"{s.name} ({_mib(s.size_bytes)})" for s in shm.nccl_segments[:3])
        issues.append(
            warn(
                f"/dev/shm is {100 - free * 100 // size}% full"
                + (f"; largest NCCL segments: {stale}" if stale else ""),
                "remove stale /dev/shm/nccl-* files of dead jobs (no job of yours running)",
            )
        )
    details = [f"{shm.fstype or 'unknown fs'}, size {_mib(size)}, free {_mib(free)}"]
    return conclude(env_ids.HOST_SHM, f"/dev/shm {_mib(size)}, {_mib(free)} free", issues, details)


LIVE_ONLY = "a live check of the machine running ncclcheck; not evaluated for a copied tree (--root)"


def check_hostname(snapshot: NodeSnapshot, ctx: Context) -> Check:
    if snapshot.options.root != "/":
        return skip(env_ids.HOST_HOSTNAME, LIVE_ONLY)
    host = snapshot.host.hostname
    details = [f"resolves to: {', '.join(a.addr for a in host.addrs) or 'nothing'}"] + [
        f"/etc/hosts: {line}" for line in host.hosts_lines
    ]
    if host.boot_id:
        details.append(f"NCCL host hash input: {host.hostname} + boot_id {host.boot_id}")
    issues: list[Issue] = []
    if not host.addrs:
        issues.append(
            warn(
                f"hostname '{host.hostname}' does not resolve ({host.resolve_error})",
                "add the hostname with the node's routed IP to /etc/hosts or DNS",
            )
        )
    elif all(is_loopback(a.addr) for a in host.addrs) and ctx.multi_node is not False:
        text = (
            f"hostname '{host.hostname}' resolves only to loopback ({host.addrs[0].addr}): torchrun's c10d"
            " rendezvous advertises it to the other nodes as MASTER_ADDR"
        )
        fix = "map the hostname to the routed IP in /etc/hosts or DNS, or pass torchrun --local-addr <routed IP>"
        issues.append(fail(text, fix) if ctx.multi_node else warn(text + " (fine on a single node)", fix))
    if "NCCL_HOSTID" in ctx.env:
        issues.append(
            warn(
                f"NCCL_HOSTID={ctx.env['NCCL_HOSTID']} overrides NCCL's node identity; it must be unique per"
                " physical node",
                "unset NCCL_HOSTID unless containers of one node need it",
            )
        )
    return conclude(env_ids.HOST_HOSTNAME, f"hostname '{host.hostname}'", issues, details)


def check_ptrace(snapshot: NodeSnapshot, ctx: Context) -> Check:
    if snapshot.options.root != "/":
        return skip(env_ids.HOST_PTRACE, LIVE_ONLY)
    pt = snapshot.host.ptrace
    details = [
        f"kernel.yama.ptrace_scope = {pt.scope if pt.scope is not None else 'absent (no Yama)'}",
        f"CAP_SYS_PTRACE {'present' if pt.cap_sys_ptrace else 'absent'}, uid {pt.uid}",
        f"container: {pt.container or 'none detected'}",
        f"py-spy: {pt.py_spy or 'not found'}",
    ]
    issues: list[Issue] = []
    if not pt.py_spy:
        issues.append(
            warn(
                "py-spy is not installed: `ncclcheck watch` and smoke's hang dumps cannot read stacks",
                "pip install py-spy",
            )
        )
    if pt.scope == 3:
        issues.append(
            warn(
                "ptrace_scope=3 forbids attaching to any process until reboot: no stack dumps",
                "boot with kernel.yama.ptrace_scope < 3 (sysctl.d) and reboot",
            )
        )
    elif (pt.scope or 0) >= 1 and not pt.cap_sys_ptrace:
        issues.append(
            warn(
                f"ptrace_scope={pt.scope} without CAP_SYS_PTRACE: py-spy cannot attach to running ranks",
                "run ncclcheck watch with sudo, or sudo sysctl kernel.yama.ptrace_scope=0",
            )
        )
    elif pt.container and not pt.cap_sys_ptrace:
        issues.append(
            warn(
                f"this {pt.container} container lacks CAP_SYS_PTRACE: py-spy cannot attach",
                "docker run --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add: [SYS_PTRACE]",
            )
        )
    return conclude(env_ids.HOST_PTRACE, "py-spy can attach to ranks here", issues, details, fact=False)


def check_iommu(snapshot: NodeSnapshot, ctx: Context) -> Check:
    gpus = snapshot.gpu.gpus
    if not gpus:
        return skip(env_ids.HOST_IOMMU, "no GPU here: IOMMU translation only matters for GPU P2P and GPUDirect")
    translated = [f"GPU {g.bdf} ({g.iommu_type})" for g in gpus if g.iommu_type in ("DMA", "DMA-FQ")]
    hcas = {p.hca for p in used_ports(snapshot, ctx)}
    details = [f"GPU {g.bdf}: iommu group type {g.iommu_type or 'none'}" for g in gpus]
    details += [f"HCA {h.name} at {h.pci_bdf}" for h in snapshot.ib.hcas if h.name in hcas]
    if not translated:
        return conclude(env_ids.HOST_IOMMU, "no GPU is behind a translating IOMMU", [], details)
    return conclude(
        env_ids.HOST_IOMMU,
        "",
        [
            warn(
                f"IOMMU translates DMA for {', '.join(translated)}: PCIe P2P and GPUDirect RDMA may go through the root"
                " complex (slow, or hangs)",
                "disable VT-d/IOMMU in the BIOS or boot with iommu=pt (intel_iommu=on iommu=pt);"
                " in a VM enable ATS/ACS as the NCCL docs describe",
            )
        ],
        details,
    )
