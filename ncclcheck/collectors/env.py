"""Run every probe of ``ncclcheck env`` on this node and freeze the results into a NodeSnapshot."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from ncclcheck.model.env import EnvOptions, NodeSnapshot
from ncclcheck.probes import envvars, gpu, host, ib, net, rdzv, versions

CONNECT_TIMEOUT_S = 2.0


def collect_snapshot(options: EnvOptions, environ: Mapping[str, str] | None = None) -> NodeSnapshot:
    """Collect the facts of this node (or of the tree under ``options.root``)."""
    root = options.root
    env_facts = envvars.collect(root, os.environ if environ is None else environ)
    net_facts = net.collect(root)
    effective: dict[str, str] = {}
    for var in env_facts.effective:
        effective.setdefault(var.name, var.value)
    return NodeSnapshot(
        options=options,
        versions=versions.collect(root, try_import=root == "/"),
        gpu=gpu.collect(root),
        ib=ib.collect(root),
        net=net_facts,
        host=host.collect(root),
        env=env_facts,
        rdzv=_rdzv(options, effective, net_facts),
    )


def _rdzv(options: EnvOptions, env: Mapping[str, str], net_facts: net.NetFacts) -> rdzv.RdzvFacts | None:
    addr = options.master_addr or env.get("MASTER_ADDR")
    port_text = options.master_port or env.get("MASTER_PORT")
    if not addr or options.root != "/":
        return None
    port = int(port_text) if port_text and port_text.strip().isdigit() else None  # no port: the address still
    local = frozenset(a.addr for a in net_facts.ifaddrs)
    return rdzv.collect(addr, port, local, timeout_s=CONNECT_TIMEOUT_S)


def host_name() -> str:
    return socket.gethostname()
