"""``ib.devices``, ``ib.memlock``, ``ib.peermem``: the RDMA ports NCCL will open, and what they need."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.values import is_set_to_one
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.analysis.nccl_rules import ib_ports, parse_list, port_usable, selected, state_number
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes.ib import Hca, Port

MAX_IB_DEVS = 32
KIB = 1024
NO_RDMA = "no RDMA devices (/sys/class/infiniband is empty): NCCL will use TCP sockets between nodes"


def used_ports(snapshot: NodeSnapshot, ctx: Context) -> tuple[Port, ...]:
    """The ports NCCL's IB transport would use, or none when it is disabled."""
    if is_set_to_one(ctx.env, "NCCL_IB_DISABLE"):
        return ()
    return ib_ports(snapshot.ib.hcas, ctx.env.get("NCCL_IB_HCA"))


def check_devices(snapshot: NodeSnapshot, ctx: Context) -> Check:
    hcas = snapshot.ib.hcas
    asked = ctx.env.get("NCCL_IB_HCA")
    if not hcas and asked and not is_set_to_one(ctx.env, "NCCL_IB_DISABLE"):
        return conclude(
            env_ids.IB_DEVICES,
            "",
            [
                warn(
                    f"NCCL_IB_HCA={asked} but this node has no RDMA device at all: NCCL will use TCP sockets between nodes",
                    "on a node with IB/RoCE NICs: pass /dev/infiniband into the container and load the driver (`ibv_devinfo`);"
                    " else unset NCCL_IB_HCA",
                )
            ],
        )
    if not hcas:
        return skip(env_ids.IB_DEVICES, NO_RDMA)
    used = used_ports(snapshot, ctx)
    details = [_port_line(p, p in used) for h in hcas for p in h.ports]
    issues = [i for h in hcas for p in h.ports for i in _port_issues(p, hcas, ctx)]
    issues += _hca_filter_issues(hcas, ctx) + _uverbs_issues(snapshot, used) + _mix_issues(used)
    if ctx.env.get("NCCL_NET") == "IB" and not used:
        issues.append(
            fail(
                "NCCL_NET=IB but no usable RDMA port: 'Failed to initialize any NET plugin'",
                "fix the ports above or unset NCCL_NET",
            )
        )
    if snapshot.ib.libibverbs == "":
        issues.append(
            fail(
                "RDMA hardware present but libibverbs cannot be loaded: NCCL will use TCP sockets",
                "install rdma-core / libibverbs1 (or MLNX_OFED/DOCA) in this image",
            )
        )
    names = ", ".join(p.name for p in used) or "none"
    return conclude(env_ids.IB_DEVICES, f"NCCL would use {len(used)} RDMA port(s): {names}", issues, details)


def _port_line(port: Port, used: bool) -> str:
    role = "used by NCCL" if used else "not used"
    return (
        f"{port.name} {port.link_layer} state={port.state} phys={port.phys_state} rate={port.rate}"
        f" netdev={port.netdev or '-'} ({role})"
    )


def _requested(port: Port, ctx: Context) -> bool:
    value = ctx.env.get("NCCL_IB_HCA")
    if not value:
        return False
    iflist = parse_list(value)
    return not iflist.exclude and selected(port.hca, port.port, iflist)


def _port_issues(port: Port, hcas: Sequence[Hca], ctx: Context) -> list[Issue]:
    state, phys = state_number(port.state), state_number(port.phys_state)
    if port_usable(port):
        if port.link_layer == "InfiniBand" and port.lid in ("0x0", "0xffff"):
            return [
                warn(
                    f"{port.name} is ACTIVE but has LID {port.lid}",
                    f"check the subnet manager: sminfo; ibstat {port.hca}",
                )
            ]
        return []
    if state == 4:
        return [warn(f"{port.name} link layer '{port.link_layer}' is neither InfiniBand nor Ethernet: NCCL skips it")]
    all_ports = [p for h in hcas for p in h.ports]
    hard = _requested(port, ctx) or len(all_ports) == 1
    text, fix = _why_down(port, state, phys)
    if state in (2, 3) and phys == 5:
        hard = True
    return [fail(text, fix) if hard else warn(text, fix)]


def _why_down(port: Port, state: int | None, phys: int | None) -> tuple[str, str]:
    where = f"{port.name} is {port.state} / {port.phys_state}"
    if state in (2, 3) and phys == 5:
        return (
            f"{where}: link is trained but no Subnet Manager activated the port; NCCL skips it",
            "start a subnet manager on the fabric (opensm, or the switch's SM); check with: sudo sminfo",
        )
    if phys == 3:
        return (
            f"{where}: port administratively disabled; NCCL skips it",
            f"RoCE: ip link set {port.netdev or '<netdev>'} up; IB: enable the port on the switch",
        )
    if phys in (4, 6):
        return (
            f"{where}: link is training or flapping; NCCL skips it",
            f"check the cable and transceiver: mlxlink -d {port.hca}; perfquery -x",
        )
    return (
        f"{where}: no link partner (cable, transceiver or switch port down); NCCL skips it",
        f"reseat or replace the cable, check the switch port; ibstat {port.hca}",
    )


def _hca_filter_issues(hcas: Sequence[Hca], ctx: Context) -> list[Issue]:
    value = ctx.env.get("NCCL_IB_HCA")
    if not value:
        return []
    iflist = parse_list(value)
    names = [h.name for h in hcas]
    issues: list[Issue] = []
    raw_tokens = value.lstrip("^").lstrip("=").split(",")
    if value.startswith("=^") or any(t.startswith("=") for t in raw_tokens[1:] if t):
        issues.append(
            warn(
                f"NCCL_IB_HCA={value}: '=' only works once, at the start (after '^')",
                "write it as =mlx5_0,mlx5_1 or ^=mlx5_2",
            )
        )
    for token, _ in iflist.tokens:
        hits = [n for n in names if (n == token if iflist.exact else n.startswith(token))]
        if not hits and not iflist.exclude:
            issues.append(
                fail(
                    f"NCCL_IB_HCA names '{token}', which is not an HCA here (present: {', '.join(names)})",
                    f"set NCCL_IB_HCA to HCAs of this node, e.g. ={names[0]}",
                )
            )
        elif not iflist.exact and len(hits) > 1:
            issues.append(
                warn(
                    f"NCCL_IB_HCA token '{token}' is a prefix and selects {', '.join(hits)}",
                    f"use exact names: export NCCL_IB_HCA='{'^' if iflist.exclude else ''}={','.join(hits)}'",
                )
            )
    requested = ib_ports(hcas, value, usable_only=False)
    usable = ib_ports(hcas, value)
    if not iflist.exclude and requested and not usable:
        down = ", ".join(p.name for p in requested)
        issues.append(
            fail(
                f"NCCL_IB_HCA={value} matches only ports that are not ACTIVE ({down}):"
                " NCCL silently falls back to TCP sockets",
                "bring the port up, or name an ACTIVE HCA",
            )
        )
    elif not usable and ib_ports(hcas, None):
        issues.append(
            fail(
                f"NCCL_IB_HCA={value} leaves no usable RDMA port: NCCL falls back to TCP sockets",
                "unset NCCL_IB_HCA or name an ACTIVE HCA",
            )
        )
    return issues


def _uverbs_issues(snapshot: NodeSnapshot, used: Sequence[Port]) -> list[Issue]:
    facts = snapshot.ib
    if not facts.dev_infiniband and facts.root != "/":
        return []
    issues = []
    for hca in facts.hcas:
        if hca.uverbs and not hca.uverbs_dev_accessible:
            state = "missing" if not hca.uverbs_dev_present else "not accessible"
            text = (
                f"/dev/infiniband/{hca.uverbs} ({hca.name}) is {state}: RDMA devices are not passed into"
                " this container, so libibverbs does not see the HCA"
            )
            fix = (
                f"docker run --device=/dev/infiniband/{hca.uverbs} (or --device=/dev/infiniband);"
                " Kubernetes: request the RDMA device plugin's resource"
            )
            serious = any(p.hca == hca.name for p in used) or any(port_usable(p) for p in hca.ports)
            issues.append(fail(text, fix) if serious or facts.dev_infiniband else warn(text, fix))
    return issues


def _mix_issues(used: Sequence[Port]) -> list[Issue]:
    issues: list[Issue] = []
    layers = sorted({p.link_layer or "?" for p in used})
    if len(layers) > 1:
        issues.append(
            warn(
                f"NCCL would mix link layers ({', '.join(layers)}) across its RDMA ports",
                "restrict NCCL_IB_HCA to ports of one link layer",
            )
        )
    for layer in layers:
        rates = sorted({p.rate or "?" for p in used if p.link_layer == layer})
        if len(rates) > 1:
            issues.append(
                warn(
                    f"{layer} ports NCCL uses run at different rates: {', '.join(rates)}",
                    "check for a downshifted link: mlxlink -d <hca>; reseat the cable",
                )
            )
    if len(used) > MAX_IB_DEVS:
        issues.append(
            warn(
                f"{len(used)} usable ports but NCCL opens at most {MAX_IB_DEVS}",
                "restrict NCCL_IB_HCA to the rails you want",
            )
        )
    return issues


def check_memlock(snapshot: NodeSnapshot, ctx: Context) -> Check:
    if not used_ports(snapshot, ctx):
        return skip(env_ids.IB_MEMLOCK, "no RDMA port in use: the memlock limit only matters for RDMA")
    mem = snapshot.host.memlock
    if mem.soft is None:
        return skip(env_ids.IB_MEMLOCK, "memlock limit unknown (no proc/self/limits in the copied tree)")
    shown = "unlimited" if mem.soft == -1 else f"{(mem.soft or 0) // KIB} KiB"
    details = [
        f"soft {shown}, hard {'unlimited' if mem.hard == -1 else f'{(mem.hard or 0) // KIB} KiB'}",
        f"CAP_IPC_LOCK {'present' if mem.cap_ipc_lock else 'absent'}",
    ]
    if mem.soft == -1 or mem.cap_ipc_lock:
        return conclude(
            env_ids.IB_MEMLOCK,
            f"memlock {shown} (CAP_IPC_LOCK {'set' if mem.cap_ipc_lock else 'not needed'})",
            [],
            details,
        )
    fix = (
        "add '* soft memlock unlimited' and '* hard memlock unlimited' to /etc/security/limits.conf;"
        " docker: --ulimit memlock=-1; Kubernetes: add the IPC_LOCK capability"
    )
    text = f"memlock soft limit is {shown}: RDMA registration fails with 'ibv_reg_mr failed' / 'ibv_create_qp failed'"
    issue = fail(text, fix) if (mem.soft or 0) <= 64 * KIB else warn(text, fix)
    return conclude(env_ids.IB_MEMLOCK, "", [issue], details)


def check_peermem(snapshot: NodeSnapshot, ctx: Context) -> Check:
    if not snapshot.gpu.gpus:
        return skip(env_ids.IB_PEERMEM, "no GPU here: GPUDirect RDMA does not apply")
    if not used_ports(snapshot, ctx):
        return skip(env_ids.IB_PEERMEM, "no RDMA port in use: GPUDirect RDMA does not apply")
    found = snapshot.ib.peermem + snapshot.ib.peermem_modules
    if found:
        return conclude(env_ids.IB_PEERMEM, f"GPUDirect RDMA module loaded ({found[0]})", [], found)
    return conclude(
        env_ids.IB_PEERMEM,
        "",
        [
            warn(
                "no nvidia_peermem / nv_peer_mem loaded: NCCL uses GPUDirect RDMA only if DMA-BUF works"
                " (open driver, kernel >= 5.12); otherwise data is staged through host memory",
                "on the host: sudo modprobe nvidia-peermem (containers cannot load modules)",
            )
        ],
    )
