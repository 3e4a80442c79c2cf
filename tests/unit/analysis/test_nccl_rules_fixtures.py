"""NCCL's selection rules against the reference results computed for the sysfs fixtures."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS, expected, scenario

from ncclcheck.analysis import nccl_rules
from ncclcheck.probes import ib, net


def _ports(name: str) -> dict[str, ib.Port]:
    facts = ib.collect(str(scenario(name)))
    return {p.name: p for h in facts.hcas for p in h.ports}


@pytest.mark.parametrize("name", SCENARIOS)
def test_port_facts_and_usability(name: str) -> None:
    ports = _ports(name)
    for port_name, want in expected(name)["ports"].items():
        port = ports[port_name]
        assert port.state == want["state"]
        assert port.phys_state == want["phys_state"]
        assert port.link_layer == want["link_layer"]
        assert port.rate == want["rate"]
        assert port.lid == want["lid"]
        assert port.netdev == want["netdev"]
        assert nccl_rules.port_usable(port) is want["nccl_uses_port"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_gid_autoselect(name: str) -> None:
    ports = _ports(name)
    for port_name, want in expected(name)["ports"].items():
        port = ports[port_name]
        if "nccl_gid_index" in want:
            assert nccl_rules.nccl_gid_index(port, {}, None) == want["nccl_gid_index"]
            continue
        assert nccl_rules.nccl_gid_index(port, {}, None) == want["nccl_auto_gid_index"]
        v6 = {"NCCL_IB_ADDR_FAMILY": "AF_INET6"}
        assert nccl_rules.nccl_gid_index(port, v6, None) == want["nccl_auto_gid_index_AF_INET6"]
        v1 = {"NCCL_IB_ROCE_VERSION_NUM": "1"}
        assert nccl_rules.nccl_gid_index(port, v1, None) == want["nccl_auto_gid_index_roce_v1"]


def test_gid_addr_range_scenario2() -> None:
    port = _ports(SCENARIOS[1])["mlx5_0:1"]
    assert nccl_rules.nccl_gid_index(port, {"NCCL_IB_ADDR_RANGE": "10.9.0.0/16"}, None) == 0
    assert nccl_rules.nccl_gid_index(port, {"NCCL_IB_ADDR_RANGE": "10.0.2.0/24"}, None) == 5


def test_gid_before_2_21_is_zero_unless_set() -> None:
    port = _ports(SCENARIOS[0])["mlx5_1:1"]
    assert nccl_rules.nccl_gid_index(port, {}, (2, 20, 5)) == 0
    assert nccl_rules.nccl_gid_index(port, {"NCCL_IB_GID_INDEX": "3"}, (2, 20, 5)) == 3


@pytest.mark.parametrize("name", SCENARIOS)
def test_ib_hca_filters(name: str) -> None:
    hcas = ib.collect(str(scenario(name))).hcas
    for value, want in expected(name)["nccl_ib_devices_by_NCCL_IB_HCA"].items():
        got = [p.name for p in nccl_rules.ib_ports(hcas, None if value == "<unset>" else value)]
        assert got == want, value


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize(("rules", "version"), [("nccl>=2.28", (2, 28, 3)), ("nccl<2.28", (2, 27, 7))])
def test_socket_ifname(name: str, rules: str, version: tuple[int, int, int]) -> None:
    addrs = net.collect(str(scenario(name))).ifaddrs
    key = "nccl_socket_interfaces_by_NCCL_SOCKET_IFNAME (first = bootstrap interface)"
    for value, want in expected(name)[key].items():
        env = {} if value == "<unset>" else {"NCCL_SOCKET_IFNAME": value}
        pick = nccl_rules.socket_interfaces(addrs, env, version)
        assert [f"{a.name}({a.addr})" for a in pick.interfaces] == want[rules], value


@pytest.mark.parametrize("name", SCENARIOS)
def test_show_gids_rows(name: str) -> None:
    facts = ib.collect(str(scenario(name)))
    rows = [
        {
            "dev": p.hca,
            "port": p.port,
            "index": g.index,
            "gid": g.gid,
            "ipv4": nccl_rules.gid_ipv4(g.gid),
            "ver": {1: "v1", 2: "v2"}.get(nccl_rules.roce_version(g.type) or 0, ""),
            "ndev": g.ndev or "",
        }
        for h in facts.hcas
        for p in h.ports
        for g in p.gids
        if nccl_rules.gid_configured(g.gid)
    ]
    assert rows == expected(name)["show_gids_rows"]
