"""Test hosts in Linux network namespaces (``ip netns``, veth): real interfaces, names and MTUs of our choice.

Every test that needs them calls ``require_netns()`` first, which skips with the reason when this
machine cannot create namespaces (not root, no iproute2, a sandbox without CAP_NET_ADMIN).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class Host:
    """A test host: its own network, PID, mount and UTS namespaces, so that a process on one host cannot see
    another host's processes. Its PID 1 (a sleep) holds the namespaces; ending it ends everything on the host."""

    ns: Namespace
    name: str
    init: subprocess.Popen[str]
    pid1: int  # the host's PID 1, as this machine numbers it

    def command(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", "-t", str(self.pid1), "-n", "-p", "-m", "-u", "--", *argv]

    def popen(self, argv: Sequence[str], env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(argv), text=True, env=env, **kwargs)  # type: ignore[call-overload]

    def run(
        self, argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False)

    def end(self) -> None:
        """SIGKILL the host's PID 1: the kernel kills every process in its PID namespace. The ``nsenter`` that
        started a process there lives outside it: it is ended too (one whose child was stopped stops itself
        too, and would wait stopped forever)."""
        import psutil

        with suppress(ProcessLookupError):
            os.kill(self.pid1, 9)
        self.init.kill()
        self.init.wait(timeout=30)
        mine = ["nsenter", "-t", str(self.pid1)]
        for proc in psutil.process_iter(["cmdline"]):
            if (proc.info["cmdline"] or [])[:3] == mine:
                with suppress(psutil.Error):
                    proc.kill()


@contextmanager
def two_hosts(subnet: str = "10.78.0") -> Iterator[list[Host]]:
    """node0 (``subnet``.1) and node1 (``subnet``.2) joined by a veth, each resolving both names through its own
    /etc/hosts (``ip netns exec`` bind-mounts /etc/netns/NS/hosts), each its own PID, mount and UTS namespace."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            pytest.skip(f"util-linux `{tool}` is needed to give each test host its own PID and UTS namespace")
    import psutil  # only here: the rest of this module runs without it

    with namespaces(2) as spaces:
        made: list[Host] = []
        uplink = f"nccup{spaces[0].name[-8:-2]}"  # this machine's end: unique per test, at most 15 characters
        try:
            spaces[0].veth("h0", "h1", spaces[1])
            for i, ns in enumerate(spaces):
                ns.set("lo", "up")
                ns.ip("link", "set", f"h{i}", "name", "eth0")  # each host's own eth0, as on a cluster
                ns.addr("eth0", f"{subnet}.{i + 1}/24")
            # This machine reaches node0 (as a login node reaches the cluster): a viewer outside both hosts
            # can read the rendezvous store that node0's torchrun serves.
            _ip("link", "add", uplink, "type", "veth", "peer", "name", "up0")
            _ip("link", "set", "up0", "netns", spaces[0].name)
            spaces[0].set("up0", "up")
            spaces[0].ip("route", "add", f"{subnet}.254/32", "dev", "up0")
            _ip("addr", "add", f"{subnet}.254/32", "dev", uplink)
            _ip("link", "set", uplink, "up")
            _ip("route", "add", f"{subnet}.1/32", "dev", uplink)
            for i, ns in enumerate(spaces):
                made.append(_start_host(psutil, ns, i, f"{subnet}.1 node0\n{subnet}.2 node1\n"))
            yield made
        finally:
            for host in made:
                host.end()
            _ip("link", "del", uplink, check=False)
            for ns in spaces:
                shutil.rmtree(Path("/etc/netns") / ns.name, ignore_errors=True)


def _start_host(psutil: Any, ns: Namespace, i: int, names: str) -> Host:
    """Test host ``node{i}`` in ``ns``: its /etc/hosts (``names``), and its own PID, mount and UTS namespaces."""
    etc = Path("/etc/netns") / ns.name
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")
    script = f"hostname node{i} && exec sleep infinity"
    init = ns.popen(["unshare", "--pid", "--fork", "--mount-proc", "--uts", "sh", "-c", script])
    return Host(ns, f"node{i}", init, _child(psutil, init.pid))


def _child(psutil: Any, pid: int) -> int:
    """The pid of the first child of ``pid`` (unshare's forked child, PID 1 of the new namespace)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        children = psutil.Process(pid).children()
        if children and "sleep" in " ".join(children[0].cmdline()):
            return int(children[0].pid)
        time.sleep(0.05)
    raise RuntimeError("the test host's PID 1 never started")


@contextmanager
def bridged_hosts(count: int, subnet: str = "10.79.0") -> Iterator[list[Host]]:
    """``count`` test hosts node0.. (``subnet``.1..) on one bridge in this machine (which is ``subnet``.254), each
    with its own eth0, /etc/hosts naming them all, and its own PID, mount and UTS namespaces, as ``two_hosts``."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            pytest.skip(f"util-linux `{tool}` is needed to give each test host its own PID and UTS namespace")
    import psutil

    with namespaces(count) as spaces:
        made: list[Host] = []
        bridge = f"nccbr{spaces[0].name[-8:-2]}"
        try:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{subnet}.254/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            names = "".join(f"{subnet}.{i + 1} node{i}\n" for i in range(count))
            for i, ns in enumerate(spaces):
                port = f"{bridge}p{i}"[-15:]
                _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.name)
                _ip("link", "set", port, "master", bridge)
                _ip("link", "set", port, "up")
                ns.set("lo", "up")
                ns.addr("eth0", f"{subnet}.{i + 1}/24")
                made.append(_start_host(psutil, ns, i, names))
            yield made
        finally:
            for host in made:
                host.end()
            _ip("link", "del", bridge, check=False)
            for ns in spaces:
                shutil.rmtree(Path("/etc/netns") / ns.name, ignore_errors=True)
