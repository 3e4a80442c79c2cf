"""``net.interfaces``, ``net.socket_ifname``, ``net.gloo``: which interface NCCL and gloo bind, and why."""

from __future__ import annotations

from ncclcheck.analysis.env.context import Context, is_link_local, is_loopback
from ncclcheck.analysis.env.ib import used_ports
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.analysis.nccl_rules import (
    BAD_COMM_ID,
    NO_INTERFACE,
    VIRTUAL_INTERFACE,
    SocketPick,
    parse_list,
    socket_interfaces,
)
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes.net import IfAddr, prefix_len

# Bridges, overlays and tunnels other nodes usually cannot reach; NCCL only skips docker, lo, virbr.
SUSPICIOUS = VIRTUAL_INTERFACE


def _addresses(snapshot: NodeSnapshot, name: str) -> list[IfAddr]:
    return [a for a in snapshot.net.ifaddrs if a.name == name]


def check_interfaces(snapshot: NodeSnapshot, ctx: Context) -> Check:
    details = []
    for link in snapshot.net.links:
        addrs = _addresses(snapshot, link.name)
        running = any("RUNNING" in a.flags for a in addrs)
        shown = ", ".join(f"{a.addr}/{prefix_len(a.netmask)}" for a in addrs) or "no address"
        details.append(f"{link.name}: {link.operstate or '?'}{' RUNNING' if running else ''}, mtu {link.mtu}, {shown}")
    routed = [
        a
        for a in snapshot.net.ifaddrs
        if "RUNNING" in a.flags and not is_loopback(a.addr) and not is_link_local(a.addr)
    ]
    issues: list[Issue] = []
    if not routed:
        issues.append(_only_local(ctx))
    issues += _roce_netdev_issues(snapshot, ctx)
    names = sorted({a.name for a in routed})
    return conclude(
        env_ids.NET_INTERFACES,
        f"{len(snapshot.net.links)} interface(s); routable: {', '.join(names) or 'none'}",
        issues,
        details,
    )


def _only_local(ctx: Context) -> Issue:
    text = "no running interface with a routable address: only this node can be reached"
    fix = "bring up the cluster network interface (ip link set <if> up) and give it an address"
    return fail(text, fix) if ctx.multi_node else warn(text, fix)


def _roce_netdev_issues(snapshot: NodeSnapshot, ctx: Context) -> list[Issue]:
    issues: list[Issue] = []
    links = {link.name: link for link in snapshot.net.links}
    mtus = {}
    for port in used_ports(snapshot, ctx):
        link = links.get(port.netdev or "")
        if port.link_layer != "Ethernet" or link is None:
            continue
        mtus[port.netdev] = link.mtu
        if link.operstate not in ("up", None):
            issues.append(
                warn(
                    f"RoCE netdev {link.name} of {port.name} is {link.operstate}",
                    f"ip link set {link.name} up; check the cable",
                )
            )
    if len(set(mtus.values())) > 1:
        shown = ", ".join(f"{k}={v}" for k, v in mtus.items())
        issues.append(
            warn(
                f"RoCE netdevs NCCL uses have different MTUs ({shown})",
                "use the same MTU (e.g. 9000) on every RoCE netdev and switch port",
            )
        )
    return issues


def _pick_text(pick: SocketPick) -> str:
    return ", ".join(f"{a.name}({a.addr})" for a in pick.interfaces) or "nothing"


def check_socket_ifname(snapshot: NodeSnapshot, ctx: Context) -> Check:
    addrs = snapshot.net.ifaddrs
    pick = socket_interfaces(addrs, ctx.env, ctx.nccl)
    details = [f"NCCL sockets ({pick.rule}): {_pick_text(pick)}"]
    value = ctx.env.get("NCCL_SOCKET_IFNAME")
    if value is not None:
        default = socket_interfaces(addrs, {k: v for k, v in ctx.env.items() if k != "NCCL_SOCKET_IFNAME"}, ctx.nccl)
        details.append(f"without NCCL_SOCKET_IFNAME ({default.rule}): {_pick_text(default)}")
    boot = pick.bootstrap.addr
    if "NCCL_COMM_ID" in ctx.env:
        shown = f"{boot.name}({boot.addr})" if boot else "nothing" if pick.bootstrap.error else "not known here"
        details.append(f"NCCL bootstrap ({pick.bootstrap.rule}; NCCL_SOCKET_IFNAME plays no part): {shown}")
    issues = _syntax_issues(ctx) + _pick_issues(snapshot, pick, ctx)
    if boot:
        summary = f"NCCL bootstraps on {boot.name} ({boot.addr})"
    elif pick.bootstrap.error:
        summary = "NCCL finds no socket interface"
    else:
        summary = f"NCCL bootstraps on the interface in {pick.bootstrap.rule} (a host name, not resolved here)"
    return conclude(env_ids.NET_SOCKET_IFNAME, summary, issues, details)


def _syntax_issues(ctx: Context) -> list[Issue]:
    issues: list[Issue] = []
    value = ctx.env.get("NCCL_SOCKET_IFNAME")
    if value is not None and len(value) <= 1:
        issues.append(
            warn(
                f"NCCL_SOCKET_IFNAME='{value}' is ignored by NCCL (values of one character are skipped)",
                "give the interface name or prefix, e.g. NCCL_SOCKET_IFNAME=eth0",
            )
        )
    elif value and (value.startswith("=^") or any(t.startswith("=") for t in value.lstrip("^=").split(",")[1:])):
        issues.append(
            warn(
                f"NCCL_SOCKET_IFNAME={value}: '=' only works once, at the start (after '^')",
                "write =eth0,eth1 or ^=docker0,lo",
            )
        )
    elif value and any(" " in t for t in value.split(",")):
        issues.append(
            warn(
                f"NCCL_SOCKET_IFNAME='{value}' contains spaces, which NCCL keeps as part of the name",
                "remove the spaces",
            )
        )
    family = ctx.env.get("NCCL_SOCKET_FAMILY")
    if family is not None and family not in ("AF_INET", "AF_INET6"):
        issues.append(
            warn(
                f"NCCL_SOCKET_FAMILY={family} is silently ignored (only AF_INET or AF_INET6 count)",
                "set NCCL_SOCKET_FAMILY=AF_INET (or AF_INET6), or unset it",
            )
        )
    return issues


def _pick_issues(snapshot: NodeSnapshot, pick: SocketPick, ctx: Context) -> list[Issue]:
    names = sorted({a.name for a in snapshot.net.ifaddrs})
    value = ctx.env.get("NCCL_SOCKET_IFNAME")
    comm_id = ctx.env.get("NCCL_COMM_ID")
    if comm_id is not None and pick.bootstrap.error:
        fix = "unset NCCL_COMM_ID (torch.distributed does not need it), or set it to <root node's address>:<port>"
        if pick.bootstrap.error == BAD_COMM_ID:
            return [fail(f"NCCL_COMM_ID={comm_id} is not an address and port: '{BAD_COMM_ID}'", fix)]
        return [
            fail(
                f"NCCL_COMM_ID={comm_id}: no interface here is in the subnet of its address, which NCCL's bootstrap"
                f" needs (present: {', '.join(names)}): '{pick.bootstrap.error}'",
                fix,
            )
        ]
    if not pick.interfaces:
        # With NCCL_COMM_ID the bootstrap found its interface above: NCCL's socket transport fails instead.
        said = NO_INTERFACE if comm_id is None else "NET/Socket : no interface found"
        if value and len(value) > 1:
            return [
                fail(
                    f"NCCL_SOCKET_IFNAME={value} matches no running interface with an address"
                    f" (present: {', '.join(names)}): '{said}'",
                    "use a name or prefix present on every node (e.g. ens,eth) or an exclude list like ^docker,lo",
                )
            ]
        return [
            fail(
                f"NCCL finds no socket interface: '{said}'",
                "bring up a network interface, or set NCCL_SOCKET_IFNAME to one",
            )
        ]
    issues: list[Issue] = []
    boot = pick.bootstrap.addr
    # With NCCL_COMM_ID, its address decides the bootstrap interface; NCCL_SOCKET_IFNAME does not.
    cure = "set NCCL_COMM_ID to the root node's routed address and a port, or unset it" if comm_id is not None else None
    if boot is None:
        pass  # NCCL_COMM_ID names a host: which interface is not known here
    elif boot.name == "lo" or is_loopback(boot.addr) or is_link_local(boot.addr):
        text = f"NCCL would bootstrap on {boot.name} ({boot.addr}), which other nodes cannot reach"
        if value and parse_list(value).exclude and comm_id is None:
            text += f" (an exclude list like {value} drops NCCL's own lo/docker exclusion)"
        fix = cure or f"set NCCL_SOCKET_IFNAME to the routed interface{_routed_hint(snapshot)}, or ^docker,lo"
        if ctx.multi_node is not False:
            issues.append(fail(text, fix) if ctx.multi_node else warn(text + " (fine on a single node)", fix))
    elif SUSPICIOUS.match(boot.name):
        issues.append(
            warn(
                f"NCCL would bootstrap on {boot.name} ({boot.addr}), a bridge/overlay interface other nodes"
                " often cannot reach",
                cure or f"set NCCL_SOCKET_IFNAME to the routed interface{_routed_hint(snapshot)}",
            )
        )
    stale = [a.name for a in pick.interfaces if "RUNNING" not in a.flags]
    if stale:
        issues.append(
            warn(
                f"NCCL < 2.28 would use {', '.join(stale)} although it is not RUNNING (hang risk)",
                f"exclude it: NCCL_SOCKET_IFNAME=^{','.join(stale)},docker,lo",
            )
        )
    rdzv = snapshot.rdzv
    if rdzv and not rdzv.local and rdzv.route_source and rdzv.route_source not in {a.addr for a in pick.interfaces}:
        issues.append(
            warn(
                f"MASTER_ADDR {rdzv.addr} is reached via {rdzv.route_source}, but NCCL uses {_pick_text(pick)}",
                "set NCCL_SOCKET_IFNAME to the interface that routes to the other nodes",
            )
        )
    return issues


def _routed_hint(snapshot: NodeSnapshot, form: str = "={}") -> str:
    """`` (e.g. =eth0)``: the first running, routable, non-bridge interface, in NCCL's or gloo's form."""
    routed = [
        a.name
        for a in snapshot.net.ifaddrs
        if "RUNNING" in a.flags
        and not is_loopback(a.addr)
        and not is_link_local(a.addr)
        and not SUSPICIOUS.match(a.name)
    ]
    return f" (e.g. {form.format(routed[0])})" if routed else ""


def check_gloo(snapshot: NodeSnapshot, ctx: Context) -> Check:
    value = ctx.env.get("GLOO_SOCKET_IFNAME")
    if value is not None and len(value) > 1:
        return _gloo_named(snapshot, value)
    if snapshot.options.root != "/":
        return skip(
            env_ids.NET_GLOO, "gloo's default binds what the live hostname resolves to; not evaluated for --root"
        )
    issues: list[Issue] = []
    if value is not None:
        issues.append(warn(f"GLOO_SOCKET_IFNAME='{value}' is ignored (one character)", "give an exact interface name"))
    host = snapshot.host.hostname
    bound = next((a.addr for a in host.addrs if a.bindable), None)
    if bound is None:
        issues.append(
            warn(
                f"hostname '{host.hostname}' resolves to no local address: gloo falls back to 127.0.0.1",
                f"export GLOO_SOCKET_IFNAME=<interface>{_routed_hint(snapshot, '{}')}, or map the hostname"
                " to this node's IP in /etc/hosts or DNS",
            )
        )
        return conclude(env_ids.NET_GLOO, "", issues)
    if is_loopback(bound):
        hosts = f" (/etc/hosts: {host.hosts_lines[0]})" if host.hosts_lines else ""
        text = f"gloo would bind {bound}: hostname '{host.hostname}' resolves to loopback{hosts}"
        fix = (
            f"export GLOO_SOCKET_IFNAME=<interface>{_routed_hint(snapshot, '{}')}, or map the hostname to the"
            " node's routed IP in /etc/hosts or DNS"
        )
        if ctx.multi_node is not False:
            issues.append(fail(text, fix) if ctx.multi_node else warn(text + " (fine on a single node)", fix))
    return conclude(env_ids.NET_GLOO, f"gloo binds {bound} (hostname '{host.hostname}')", issues)


def _gloo_named(snapshot: NodeSnapshot, value: str) -> Check:
    issues: list[Issue] = []
    chosen = []
    names = sorted({a.name for a in snapshot.net.ifaddrs})
    for item in value.split(","):
        addrs = _addresses(snapshot, item)
        if not addrs:
            hint = (
                " (gloo needs exact names; prefixes work only for NCCL)"
                if any(n.startswith(item) for n in names)
                else ""
            )
            issues.append(
                fail(
                    f"GLOO_SOCKET_IFNAME item '{item}' is not an interface with an address here{hint}:"
                    f" gloo raises 'Unable to find address for: {item}'",
                    f"use exact interface names from: {', '.join(names)}",
                )
            )
        else:
            chosen.append(f"{item}({addrs[0].addr})")
    details = ["gloo uses every listed interface round-robin; every rank must list the same number"]
    if not issues:
        return conclude(env_ids.NET_GLOO, f"gloo binds {', '.join(chosen)} (GLOO_SOCKET_IFNAME)", issues, details)
    # gloo raises at the first item it cannot find, so it binds nothing: say what does resolve, if anything
    found = f"of GLOO_SOCKET_IFNAME='{value}', {', '.join(chosen)} would resolve" if chosen else ""
    return conclude(env_ids.NET_GLOO, found, issues, details)
