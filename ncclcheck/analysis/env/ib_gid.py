"""``ib.gid_index``: the RoCE GID table as show_gids prints it, NCCL's pick, and the right index."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.ib import used_ports
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.analysis.nccl_rules import (
    gid_configured,
    gid_family,
    gid_ipv4,
    gid_link_local,
    in_range,
    nccl_gid_index,
    nccl_int,
    roce_version,
)
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes.ib import Gid, Port

ROW = "{:<8} {:<4} {:<5} {:<39} {:<15} {:<3} {}"
HEADER = ROW.format("DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV")


def show_gids(port: Port) -> list[str]:
    """Rows in show_gids' columns: DEV PORT INDEX GID IPv4 VER DEV."""
    return [
        ROW.format(port.hca, port.port, g.index, g.gid, gid_ipv4(g.gid) or "", _ver(g), g.ndev or "")
        for g in port.gids
        if gid_configured(g.gid)
    ]


def _ver(gid: Gid) -> str:
    return {1: "v1", 2: "v2"}.get(roce_version(gid.type) or 0, "-")


def recommended(port: Port) -> int | None:
    """The first RoCE v2 GID with an IPv4 address: the index NVIDIA's docs say to use."""
    for gid in port.gids:
        if roce_version(gid.type) == 2 and gid_ipv4(gid.gid):
            return gid.index
    return None


def check_gid_index(snapshot: NodeSnapshot, ctx: Context) -> Check:
    roce = [p for p in used_ports(snapshot, ctx) if p.link_layer == "Ethernet"]
    if not roce:
        return skip(env_ids.IB_GID_INDEX, "no RoCE port in use: the GID index only matters for RoCE")
    details = [HEADER] + [row for p in roce for row in show_gids(p)]
    issues: list[Issue] = []
    picks = []
    for port in roce:
        pick = nccl_gid_index(port, ctx.env, ctx.nccl)
        rec = recommended(port)
        picks.append(f"{port.name}: NCCL uses GID {pick}" + (f", recommended {rec}" if rec is not None else ""))
        issues += _port_issues(port, pick, rec, ctx)
    issues += _global_issues(roce, ctx)
    return conclude(env_ids.IB_GID_INDEX, "; ".join(picks), issues, picks + details)


def _port_issues(port: Port, pick: int, rec: int | None, ctx: Context) -> list[Issue]:
    if rec is None:
        return [
            fail(
                f"{port.name} has no RoCE v2 GID with an IPv4 address (netdev {port.netdev}):"
                " RoCE v2 is not configured or the netdev has no IP",
                f"assign an IPv4 address to {port.netdev or 'the port netdev'}; for a RoCE v1 fabric"
                " set NCCL_IB_ROCE_VERSION_NUM=1",
            )
        ]
    set_value = ctx.env.get("NCCL_IB_GID_INDEX")
    if set_value is not None:
        return _set_index_issues(port, nccl_int(set_value).value if set_value else None, set_value, rec, ctx)
    if ctx.nccl is not None and ctx.nccl < (2, 21, 0):
        return [
            warn(
                f"NCCL {'.'.join(map(str, ctx.nccl))} uses GID index 0 (link-local, RoCE v1) on {port.name}",
                f"export NCCL_IB_GID_INDEX={rec} (or upgrade to NCCL >= 2.21, which picks it itself)",
            )
        ]
    gid = next((g for g in port.gids if g.index == pick), None)
    if gid is None or not gid_configured(gid.gid) or gid_link_local(gid.gid):
        if ctx.env.get("NCCL_IB_ADDR_RANGE") and not any(
            in_range(g.gid, ctx.env["NCCL_IB_ADDR_RANGE"]) for g in port.gids if gid_configured(g.gid)
        ):
            return [
                warn(
                    f"NCCL_IB_ADDR_RANGE={ctx.env['NCCL_IB_ADDR_RANGE']} matches no GID on {port.name}:"
                    f" NCCL silently keeps GID {pick} (link-local)",
                    f"fix or unset NCCL_IB_ADDR_RANGE (the IPv4 RoCE v2 GID is index {rec})",
                )
            ]
        return [
            warn(
                f"NCCL would use GID {pick} on {port.name}, which is not routable",
                f"assign an IP address to {port.netdev}, or export NCCL_IB_GID_INDEX={rec}",
            )
        ]
    return []


def _set_index_issues(port: Port, index: int | None, raw: str, rec: int, ctx: Context) -> list[Issue]:
    fix = (
        f"export NCCL_IB_GID_INDEX={rec}"
        if ctx.nccl and ctx.nccl < (2, 21, 0)
        else (f"unset NCCL_IB_GID_INDEX (NCCL >= 2.21 picks index {rec} itself), or set it to {rec}")
    )
    gid = next((g for g in port.gids if g.index == index), None)
    where = f"NCCL_IB_GID_INDEX={raw} on {port.name}"
    if gid is None or not gid_configured(gid.gid):
        return [fail(f"{where} points at an empty GID slot: 'ibv_modify_qp failed' or a hang", fix)]
    if gid_link_local(gid.gid):
        return [fail(f"{where} is a link-local GID ({gid.gid}), not routable between nodes", fix)]
    if roce_version(gid.type) != 2:
        return [fail(f"{where} is a RoCE v1 GID ({gid.type}); a RoCE v2 fabric needs v2", fix)]
    if gid_family(gid.gid) != "AF_INET":
        return [warn(f"{where} is an IPv6 RoCE v2 GID ({gid.gid}); nodes on IPv4 will not match it", fix)]
    if index != rec:
        return [warn(f"{where} is valid but differs from the first IPv4 RoCE v2 GID ({rec})", fix)]
    if ctx.nccl is None or ctx.nccl >= (2, 21, 0):
        return [
            warn(
                f"{where} is right today, but NCCL >= 2.21 picks the GID itself and the index can"
                " shift when addresses change",
                "unset NCCL_IB_GID_INDEX",
            )
        ]
    return []


def _global_issues(roce: Sequence[Port], ctx: Context) -> list[Issue]:
    recs = {p.name: recommended(p) for p in roce}
    if len({r for r in recs.values() if r is not None}) > 1 and (
        ctx.env.get("NCCL_IB_GID_INDEX") is not None or (ctx.nccl and ctx.nccl < (2, 21, 0))
    ):
        listing = ", ".join(f"{k}:{v}" for k, v in recs.items())
        return [
            warn(
                f"the right GID index differs between HCAs ({listing}) but NCCL_IB_GID_INDEX is one value",
                "use NCCL >= 2.21 with NCCL_IB_GID_INDEX unset, or restrict NCCL_IB_HCA",
            )
        ]
    return []
