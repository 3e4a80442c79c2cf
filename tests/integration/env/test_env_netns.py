"""``ncclcheck env`` inside network namespaces with real interfaces named like eth0/docker0/ib0/virbr0."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from netns import Namespace, namespaces

pytestmark = pytest.mark.integration


def env_json(ns: Namespace, *args: str, **env: str) -> dict[str, Any]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "MASTER_"))}
    full.update(env)
    done = ns.run([sys.executable, "-m", "ncclcheck", "env", "--json", "--no-import", *args], env=full)
    report: dict[str, Any] = json.loads(done.stdout)
    failed = any(c["status"] == "fail" for c in report["checks"])
    assert done.returncode == (1 if failed else 0), done.stderr  # the exit code says what the report says
    return {c["id"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def node() -> Iterator[Namespace]:
    """A host with eth0 (mtu 9000), docker0, ib0 and virbr0, all up, and lo up."""
    with namespaces(1) as (ns,):
        ns.veth("eth0", "docker0")
        ns.veth("ib0", "virbr0")
        ns.addr("eth0", "10.77.1.1/24", mtu=9000)
        ns.addr("docker0", "172.17.0.1/16")
        ns.addr("ib0", "192.168.77.1/24", mtu=2044)
        ns.addr("virbr0", "192.168.122.1/24")
        ns.set("lo", "up")
        yield ns


def test_interfaces_listed_with_mtu(node: Namespace) -> None:
    checks = env_json(node)
    details = "\n".join(checks["net.interfaces"]["details"])
    assert "eth0: up RUNNING, mtu 9000, 10.77.1.1/24" in details
    assert "ib0: up RUNNING, mtu 2044, 192.168.77.1/24" in details


def test_nccl_prefers_ib_interfaces(node: Namespace) -> None:
    assert env_json(node)["net.socket_ifname"]["summary"] == "NCCL bootstraps on ib0 (192.168.77.1)"


def test_ifname_prefix_and_exact(node: Namespace) -> None:
    assert (
        env_json(node, NCCL_SOCKET_IFNAME="eth")["net.socket_ifname"]["summary"]
        == "NCCL bootstraps on eth0 (10.77.1.1)"
    )
    sock = env_json(node, NCCL_SOCKET_IFNAME="=eth1")["net.socket_ifname"]
    assert sock["status"] == "fail" and "matches no running interface" in sock["summary"]


def test_exclude_list_without_lo_picks_loopback(node: Namespace) -> None:
    sock = env_json(node, "--nnodes", "2", NCCL_SOCKET_IFNAME="^docker")["net.socket_ifname"]
    assert sock["status"] == "fail"
    assert sock["summary"].startswith("NCCL would bootstrap on lo (127.0.0.1)")
    assert "=eth0" in sock["fix"]


def test_down_ib_interface_is_skipped_and_bridges_excluded(node: Namespace) -> None:
    node.set("ib0", "down")
    try:
        checks = env_json(node)
        assert checks["net.socket_ifname"]["summary"] == "NCCL bootstraps on eth0 (10.77.1.1)"
        node.set("eth0", "down")
        sock = env_json(node)["net.socket_ifname"]
        # docker0 lost its carrier with eth0 (a veth pair), virbr0 with ib0: only lo is left.
        assert "lo (127.0.0.1)" in sock["summary"]
    finally:
        node.set("eth0", "up")
        node.set("ib0", "up")


def test_gloo_interface_names_are_exact(node: Namespace) -> None:
    assert env_json(node, GLOO_SOCKET_IFNAME="eth0")["net.gloo"]["status"] == "ok"
    gloo = env_json(node, GLOO_SOCKET_IFNAME="eth")["net.gloo"]
    assert gloo["status"] == "fail" and "Unable to find address for: eth" in gloo["summary"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_rdzv_local_port_in_use_fails_and_free_port_passes(capsys: pytest.CaptureFixture[str]) -> None:
    from ncclcheck.cli import main

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["env", "--json", "--no-import", "--master-addr", "127.0.0.1", "--master-port", str(port)]) == 1
    capsys.readouterr()
    free = _free_port()
    main(["env", "--json", "--no-import", "--master-addr", "127.0.0.1", "--master-port", str(free)])
    (rdzv,) = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["id"] == "rdzv"]
    assert rdzv["status"] == "ok" and f"127.0.0.1:{free}" in rdzv["summary"]


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[list[Namespace]]:
    """Two hosts joined by a veth pair: 10.78.0.1 (master) and 10.78.0.2."""
    with namespaces(2) as (master, worker):
        master.veth("eth0", "eth1", peer_ns=worker)
        master.addr("eth0", "10.78.0.1/24")
        worker.addr("eth1", "10.78.0.2/24")
        master.set("lo", "up")
        worker.set("lo", "up")
        yield [master, worker]


def test_rdzv_remote_refused_then_reachable(two_nodes: list[Namespace]) -> None:
    master, worker = two_nodes
    rdzv = env_json(worker, "--master-addr", "10.78.0.1", "--master-port", "29533")["rdzv"]
    assert rdzv["status"] == "warn" and "connection refused" in rdzv["summary"]
    assert "something listens" not in rdzv["summary"]
    server = master.popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('10.78.0.1', 29533)); s.listen(); print('up', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        rdzv = env_json(worker, "--master-addr", "10.78.0.1", "--master-port", "29533")["rdzv"]
        assert rdzv["status"] == "ok", rdzv
        assert "a remote node" in rdzv["summary"] and "something listens on port 29533" in rdzv["summary"]
        own = env_json(master, "--master-addr", "10.78.0.1", "--master-port", "29533")["rdzv"]
        assert own["status"] == "fail" and "already in use" in own["summary"]
    finally:
        server.kill()
        server.wait()


def test_rdzv_unresolvable_and_bad_port(two_nodes: list[Namespace]) -> None:
    _, worker = two_nodes
    rdzv = env_json(worker, "--master-addr", "no-such-host.invalid", "--master-port", "29500")["rdzv"]
    assert rdzv["status"] == "fail" and "does not resolve" in rdzv["summary"]
    rdzv = env_json(worker, "--master-addr", "10.78.0.1", "--master-port", "70000")["rdzv"]
    assert rdzv["status"] == "fail" and "not a TCP port" in rdzv["summary"]


def test_rdzv_remote_without_a_port_tries_torchruns_default(two_nodes: list[Namespace]) -> None:
    """No --master-port: the remote host is tried on 29500 (nothing listens there), never passed unseen."""
    _, worker = two_nodes
    rdzv = env_json(worker, "--master-addr", "10.78.0.1")["rdzv"]
    assert rdzv["status"] == "warn", rdzv
    assert "10.78.0.1:29500 (torchrun's default; MASTER_PORT unset): connection refused" in rdzv["summary"]


def test_rdzv_no_route_fails_and_says_so(two_nodes: list[Namespace]) -> None:
    """The worker host has no route outside 10.78.0.0/24 (no default route): the kernel refuses at once."""
    _, worker = two_nodes
    rdzv = env_json(worker, "--master-addr", "10.79.5.5", "--master-port", "29533")["rdzv"]
    assert rdzv["status"] == "fail", rdzv
    assert "no route to the host" in rdzv["summary"] and "ENETUNREACH" in rdzv["summary"]
    assert "something listens" not in rdzv["summary"]


def test_rdzv_dropped_packets_time_out_and_fail(two_nodes: list[Namespace]) -> None:
    """10.78.0.9 is given a MAC no host on the link has: SYNs leave the worker host and nothing answers."""
    _, worker = two_nodes
    worker.ip("neigh", "replace", "10.78.0.9", "lladdr", "02:00:00:00:00:99", "dev", "eth1", "nud", "permanent")
    try:
        rdzv = env_json(worker, "--master-addr", "10.78.0.9", "--master-port", "29533")["rdzv"]
    finally:
        worker.ip("neigh", "del", "10.78.0.9", "dev", "eth1")
    assert rdzv["status"] == "fail", rdzv
    assert "10.78.0.9:29533: timed out, no answer" in rdzv["summary"]
