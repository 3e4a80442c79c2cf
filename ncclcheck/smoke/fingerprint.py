"""This rank's fingerprint: host, versions, backend, the interface and HCA ports it would use, NCCL settings."""

from __future__ import annotations

import os
import socket

from ncclcheck.analysis.nccl_rules import Version
from ncclcheck.analysis.smoke.fingerprint import ib_port_names, settings, socket_interface
from ncclcheck.model.smoke import SET_BY_SMOKE, Fingerprint
from ncclcheck.probes import host, ib, net


def collect(rank: int, backend: str, torch_version: str, nccl: Version | None) -> Fingerprint:
    env = dict(os.environ)
    ours = set(env.get(SET_BY_SMOKE, "").split(","))  # set by smoke's launcher, not by the user
    hostname = host.collect().hostname
    return Fingerprint(
        rank=rank,
        host=socket.gethostname(),
        torch=torch_version,
        nccl=".".join(map(str, nccl)) if nccl else None,
        backend=backend,
        socket_ifname=socket_interface(backend, net.collect().ifaddrs, hostname, env, nccl),
        ib_ports=ib_port_names(ib.collect().hcas, env, nccl) if backend == "nccl" else (),
        env=settings({k: v for k, v in env.items() if k not in ours}),
    )
