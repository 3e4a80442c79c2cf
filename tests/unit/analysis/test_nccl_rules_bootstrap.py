"""NCCL's bootstrap interface (``bootstrapNetInit``): with NCCL_COMM_ID set, the first interface in the subnet of
its address, NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY and the interface's state notwithstanding; the real NCCL
showed ``env`` predicting the NCCL_SOCKET_IFNAME pick instead (tests/integration/env/test_env_oracle.py holds it to the real one).
"""

from __future__ import annotations

import dataclasses

import pytest
from snapshots import LO, bare, check

from ncclcheck.analysis import nccl_rules
from ncclcheck.analysis.nccl_rules import BAD_COMM_ID, NO_INTERFACE, NO_SUBNET, socket_interfaces
from ncclcheck.model.checks import Status
from ncclcheck.probes.net import IfAddr

RUNNING = ("UP", "BROADCAST", "RUNNING", "MULTICAST")
ETH0 = IfAddr("eth0", "AF_INET", "10.77.1.1", "255.255.255.0", RUNNING)
IB0 = IfAddr("ib0", "AF_INET", "192.168.77.1", "255.255.255.0", RUNNING)
ETH0_V6 = IfAddr("eth0", "AF_INET6", "fd77::1", "ffff:ffff:ffff:ffff::", RUNNING)
ENS6_LL = IfAddr("ens6", "AF_INET6", "fe80::6", "ffff:ffff:ffff:ffff::", RUNNING)
ADDRS = (LO, ETH0, IB0, ETH0_V6, ENS6_LL)


def boot(env: dict[str, str], addrs: tuple[IfAddr, ...] = ADDRS) -> nccl_rules.Bootstrap:
    return socket_interfaces(addrs, env, (2, 32, 3)).bootstrap


def test_without_comm_id_the_bootstrap_is_the_first_socket_interface() -> None:
    assert boot({}).addr == IB0
    assert boot({"NCCL_SOCKET_IFNAME": "=eth0"}).addr == ETH0
    assert boot({"NCCL_SOCKET_IFNAME": "=eth1"}) == nccl_rules.Bootstrap(None, "NCCL_SOCKET_IFNAME==eth1", NO_INTERFACE)


@pytest.mark.parametrize(
    ("comm_id", "env", "expected"),
    [
        ("10.77.1.99:29500", {"NCCL_SOCKET_IFNAME": "ib"}, ETH0),  # NCCL_SOCKET_IFNAME plays no part
        ("127.0.0.1:29500", {}, LO),
        ("[fd77::9]:29500", {"NCCL_SOCKET_FAMILY": "AF_INET"}, ETH0_V6),  # nor does NCCL_SOCKET_FAMILY
        ("[fe80::9%ens6]:29500", {}, ENS6_LL),  # a link-local address matches with its interface as scope
        ("[fe80::9%eth0]:29500", {}, None),
        ("[fe80::9]:29500", {}, None),  # unscoped: never the link-local addresses, which carry a scope
        ("10.99.0.1:29500", {}, None),
    ],
)
def test_comm_id_bootstraps_in_its_subnet(comm_id: str, env: dict[str, str], expected: IfAddr | None) -> None:
    got = boot({"NCCL_COMM_ID": comm_id, **env})
    assert got.addr == expected
    assert got.error == (None if expected else NO_SUBNET)


def test_comm_id_subnet_match_takes_an_interface_that_is_not_running() -> None:
    down = dataclasses.replace(IB0, flags=("UP", "BROADCAST"))
    assert boot({"NCCL_COMM_ID": "192.168.77.9:29500"}, (LO, ETH0, down)).addr == down
    assert boot({}, (LO, ETH0, down)).addr == ETH0


@pytest.mark.parametrize("comm_id", ["", "x", ":29500", "[fd77::9:29500"])
def test_comm_id_nccl_cannot_read(comm_id: str) -> None:
    assert boot({"NCCL_COMM_ID": comm_id}).error == BAD_COMM_ID


def test_comm_id_host_name_is_not_resolved_by_the_rules() -> None:
    got = boot({"NCCL_COMM_ID": "node0:29500"})
    assert (got.addr, got.error) == (None, None)


def test_comm_id_hints_the_socket_interfaces_after_ib() -> None:
    hinted = socket_interfaces((LO, ETH0, ETH0_V6), {"NCCL_COMM_ID": "[fd77::9]:29500"}, (2, 32, 3))
    assert hinted.interfaces == (ETH0_V6,)
    assert hinted.rule == "default (the subnet of NCCL_COMM_ID=[fd77::9]:29500)"
    assert socket_interfaces(ADDRS, {"NCCL_COMM_ID": "10.77.1.9:1"}, (2, 32, 3)).interfaces == (IB0,)


def _net(*addrs: IfAddr) -> dict[str, object]:
    return {"net": dataclasses.replace(bare().net, ifaddrs=addrs)}


def test_env_says_where_comm_id_bootstraps() -> None:
    snapshot = bare({"NCCL_COMM_ID": "10.77.1.99:29500", "NCCL_SOCKET_IFNAME": "ib"}, **_net(LO, ETH0, IB0))
    sock = check(snapshot, "net.socket_ifname")
    assert sock.summary == "NCCL bootstraps on eth0 (10.77.1.1)"
    assert (
        "NCCL bootstrap (the subnet of NCCL_COMM_ID=10.77.1.99:29500; NCCL_SOCKET_IFNAME plays no part): eth0(10.77.1.1)"
        in sock.details
    )


def test_env_fails_a_comm_id_outside_every_subnet_with_nccls_words() -> None:
    sock = check(bare({"NCCL_COMM_ID": "10.99.0.1:29500"}, **_net(LO, ETH0)), "net.socket_ifname")
    assert sock.status is Status.FAIL
    assert sock.summary.startswith("NCCL_COMM_ID=10.99.0.1:29500: no interface here is in the subnet")
    assert f"'{NO_SUBNET}'" in sock.summary
    bad = check(bare({"NCCL_COMM_ID": ":29500"}, **_net(LO, ETH0)), "net.socket_ifname")
    assert bad.status is Status.FAIL and f"'{BAD_COMM_ID}'" in bad.summary


def test_env_comm_id_on_loopback_fails_multi_node() -> None:
    sock = check(
        bare({"NCCL_COMM_ID": "127.0.0.1:29500", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}), "net.socket_ifname"
    )
    assert sock.status is Status.FAIL and sock.summary.startswith("NCCL would bootstrap on lo (127.0.0.1)")
    assert sock.fix == "set NCCL_COMM_ID to the root node's routed address and a port, or unset it"


def test_env_comm_id_host_name_is_said_not_guessed() -> None:
    sock = check(bare({"NCCL_COMM_ID": "node0:29500"}), "net.socket_ifname")
    assert sock.status is Status.OK
    assert sock.summary == (
        "NCCL bootstraps on the interface in the subnet of NCCL_COMM_ID=node0:29500 (a host name, not resolved here)"
    )
