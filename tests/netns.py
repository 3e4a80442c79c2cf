"""Test hosts in Linux network namespaces (``ip netns``, veth): real interfaces, names and MTUs of our choice.

Every test that needs them calls ``require_netns()`` first, which skips with the reason when this
machine cannot create namespaces (not root, no iproute2, a sandbox without CAP_NET_ADMIN).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    name = f"ncc-probe-{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def require_netns() -> None:
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"cannot create network namespaces here: {reason}")


@dataclass
class Namespace:
    """One test host: a network namespace; ``run`` executes a command inside it."""

    name: str
    links: list[str] = field(default_factory=list)

    def ip(self, *args: str) -> None:
        _ip("-n", self.name, *args)

    def run(
        self, argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def popen(self, argv: Sequence[str], env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen[str]:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *argv], text=True, env=env, **kwargs)  # type: ignore[call-overload]

    def veth(self, name: str, peer: str, peer_ns: Namespace | None = None) -> None:
        """A veth pair ``name``-``peer``, the peer here or in ``peer_ns``."""
        self.ip("link", "add", name, "type", "veth", "peer", "name", peer)
        if peer_ns is not None:
            self.ip("link", "set", peer, "netns", peer_ns.name)

    def addr(self, link: str, cidr: str, mtu: int | None = None, up: bool = True) -> None:
        self.ip("addr", "add", cidr, "dev", link)
        if mtu:
            self.ip("link", "set", link, "mtu", str(mtu))
        self.ip("link", "set", link, "up" if up else "down")

    def set(self, link: str, state: str) -> None:
        self.ip("link", "set", link, state)


@contextmanager
def namespaces(count: int) -> Iterator[list[Namespace]]:
    """``count`` fresh namespaces, deleted afterwards whatever happens."""
    require_netns()
    tag = uuid.uuid4().hex[:6]
    made = []
    try:
        for i in range(count):
            ns = Namespace(f"ncc-{tag}-{i}")
            _ip("netns", "add", ns.name)
            made.append(ns)
        yield made
    finally:
        for ns in made:
            _ip("netns", "del", ns.name, check=False)
