"""Hand-built NodeSnapshots for pure analysis tests: a bare node, overridden field by field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ncclcheck.analysis.env import analyse
from ncclcheck.model.checks import Check
from ncclcheck.model.env import EnvOptions, NodeSnapshot
from ncclcheck.probes import envvars, gpu, host, ib, net, versions

LO = net.IfAddr("lo", "AF_INET", "127.0.0.1", "255.0.0.0", ("UP", "LOOPBACK", "RUNNING"))
ETH0 = net.IfAddr("eth0", "AF_INET", "10.1.0.5", "255.255.255.0", ("UP", "BROADCAST", "RUNNING", "MULTICAST"))


def bare(env: Mapping[str, str] | None = None, **fields: Any) -> NodeSnapshot:
    """A GPU-less, IB-less node with lo and eth0, a sane host, and ``env`` as its environment."""
    snapshot = NodeSnapshot(
        options=EnvOptions(),
        versions=versions.VersionFacts("3.11.7", "Linux", None, "no torch", None, (), None, None),
        gpu=gpu.GpuFacts((), False, None),
        ib=ib.IbFacts("/", False, (), False, None, (), ()),
        net=net.NetFacts(
            "test", (LO, ETH0), (net.Link("lo", "unknown", 65536, 772, 1), net.Link("eth0", "up", 1500, 1, 1))
        ),
        host=host.HostFacts(
            shm=host.Shm("/dev/shm", True, True, 8 << 30, 8 << 30, "tmpfs", ()),
            hostname=host.Hostname("node1", (host.HostAddr("10.1.0.5", True),), None, (), "boot"),
            ptrace=host.Ptrace(0, True, 0, "/usr/bin/py-spy", None),
            memlock=host.Memlock(-1, -1, False),
        ),
        env=envvars.collect("/nonexistent-root", dict(env or {})),
        rdzv=None,
    )
    return dataclasses.replace(snapshot, **fields)


def check(snapshot: NodeSnapshot, check_id: str) -> Check:
    report = analyse(snapshot, "test")
    return next(c for c in report.checks if c.id == check_id)
