"""The per-rank transport map read from NCCL logs, as a rich table or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ncclcheck.model.logs import RankLog, peer_map


def transports_json(logs: Sequence[RankLog]) -> list[dict[str, Any]]:
    return [
        {
            "rank": log.rank,
            "host": log.host,
            "pid": log.pid,
            "cuda_dev": log.dev,
            "bus_id": log.bus_id,
            "nranks": log.nranks,
            "nccl_version": log.nccl_version,
            "network": log.network,
            "net_devices": list(log.net_devices),
            "socket_interfaces": list(log.socket_interfaces),
            "bootstrap": list(log.bootstrap),
            "gdr_disabled": list(log.gdr_disabled),
            "init_complete": log.init_complete,
            "env": dict(log.env),
            "peers": {str(peer): list(t) for peer, t in peer_map(log).items()},
        }
        for log in logs
    ]


def transport_table(logs: Sequence[RankLog]) -> Table:
    table = Table(title="transport map (from NCCL_DEBUG=INFO)", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("rank", "host", "network", "devices / interfaces", "peers"):
        table.add_column(name, overflow="fold")
    for log in sorted(logs, key=lambda g: (g.rank is None, g.rank or 0, g.host or "")):
        devices = " ".join(log.net_devices or log.socket_interfaces)
        if log.gdr_disabled:
            devices += " (GDR off)"
        peers = "; ".join(f"{peer}: {', '.join(t)}" for peer, t in peer_map(log).items())
        table.add_row(
            Text("?" if log.rank is None else str(log.rank)),
            Text(f"{log.host or '?'}:{log.pid or '?'} [{log.dev}]"),
            Text(log.network or "-"),
            Text(devices or "-"),
            Text(peers or "-"),
        )
    return table


def informative(logs: Sequence[RankLog]) -> list[RankLog]:
    """Ranks whose log says something about the network or transports."""
    return [g for g in logs if g.network or g.net_devices or g.socket_interfaces or g.connections]


def render_transports(logs: Sequence[RankLog], console: Console) -> None:
    shown = informative(logs)
    if shown:
        console.print(transport_table(shown))
