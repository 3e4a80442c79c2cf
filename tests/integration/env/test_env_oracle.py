"""The real NCCL as the oracle for ``env``'s prediction of NCCL's socket interface.

On a test host (a network namespace) with several interfaces, for each row of NCCL_SOCKET_IFNAME /
NCCL_SOCKET_FAMILY settings, the real ``libnccl.so.2`` (NVIDIA's wheel, ``tests/libnccl.py``) runs its bootstrap
init through ``ncclGetUniqueId`` and says which interface it uses (``tests/workers/nccl_bootstrap.py``), and
``ncclcheck env --json`` runs on the same host with the same environment and the same library: the interface
``env`` predicts (``net.socket_ifname``) must be the one NCCL really took, and where NCCL finds none, ``env``'s
check fails quoting NCCL's own error. Each row also names the interface expected, so a broken host setup (say,
every row finding nothing) cannot pass.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKERS
from libnccl import VERSION, require_libnccl
from netns import Namespace, namespaces

pytestmark = pytest.mark.integration

WORKER = WORKERS / "nccl_bootstrap.py"
BOOTS = re.compile(r"^NCCL bootstraps on (?P<name>\S+) \((?P<addr>[^)]*)\)$")
Pick = tuple[str, str] | None  # (interface, address) NCCL bootstraps on, or None: NCCL finds no interface


@pytest.fixture(scope="module")
def lib() -> Path:
    return require_libnccl()


@pytest.fixture(scope="module")
def host() -> Iterator[Namespace]:
    """A host whose getifaddrs order is lo, docker0, eth0, virbr0, ib0, ens6, ens5 (a veth's peer gets the
    lower index). IPv4: eth0 10.77.1.1, docker0 172.17.0.1, ib0 192.168.77.1, virbr0 192.168.122.1. IPv6: eth0
    fd77::1 too (dual-stack), ens5 fd78::5 only, ens6 the link-local fe80::6 only. No address the kernel makes up
    (addrgenmode none) and none tentative (nodad), so both programs see the same fixed list."""
    with namespaces(1) as (ns,):
        ns.veth("eth0", "docker0")
        ns.veth("ib0", "virbr0")
        ns.veth("ens5", "ens6")
        addrs = {
            "eth0": ["10.77.1.1/24", "fd77::1/64"],
            "docker0": ["172.17.0.1/16"],
            "ib0": ["192.168.77.1/24"],
            "virbr0": ["192.168.122.1/24"],
            "ens5": ["fd78::5/64"],
            "ens6": ["fe80::6/64"],
        }
        for link, cidrs in addrs.items():
            ns.ip("link", "set", link, "addrgenmode", "none")
            for cidr in cidrs:
                ns.ip("addr", "add", cidr, "dev", link, *(["nodad"] if ":" in cidr else []))
        for link in ("lo", *addrs):
            ns.set(link, "up")
        yield ns


def clean_env(**env: str) -> dict[str, str]:
    drop = ("NCCL_", "GLOO_", "MASTER_", "LD_PRELOAD", "LD_LIBRARY_PATH")
    full = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    full.update(env)
    return full


def real_nccl(ns: Namespace, lib: Path, env: dict[str, str]) -> tuple[Pick, dict[str, Any]]:
    """What the real NCCL bootstraps on in ``ns`` with ``env``, and the worker's whole answer."""
    done = ns.run([sys.executable, str(WORKER), str(lib)], env=clean_env(**env))
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    if answer["interface"] is None:
        assert answer["rc"] != 0, answer["log"]  # no "Using" line only when the bootstrap failed
        return None, answer
    assert answer["rc"] == 0, answer["log"]
    # NCCL prints a link-local address with its scope (fe80::6%ens6); getifaddrs' address, env's, has none.
    return (answer["interface"], answer["addr"].split("%", 1)[0]), answer


def env_check(ns: Namespace, lib: Path, env: dict[str, str]) -> dict[str, Any]:
    """``env --json``'s net.socket_ifname check in ``ns``, with the real library on LD_LIBRARY_PATH."""
    full = clean_env(LD_LIBRARY_PATH=str(lib.parent), **env)
    done = ns.run([sys.executable, "-m", "ncclcheck", "env", "--json", "--no-import"], env=full)
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["nccl_rules"] == VERSION, report["nccl_rules"]  # env judged by the rules of the real NCCL
    checks = {c["id"]: c for c in report["checks"]}
    failed = any(c["status"] == "fail" for c in checks.values())
    assert done.returncode == (1 if failed else 0), done.stderr
    check: dict[str, Any] = checks["net.socket_ifname"]
    return check


def predicted(check: dict[str, Any]) -> Pick:
    """The bootstrap interface ``env`` predicts: its "NCCL bootstraps on NAME (ADDR)" line (the summary, or a
    detail line under a warning), or None where its check fails because NCCL finds none."""
    lines = [check["summary"], *check["details"]]
    said = {(m["name"], m["addr"]) for line in lines if (m := BOOTS.match(line))}
    assert len(said) <= 1, check
    if not said:
        assert check["status"] == "fail", check
        return None
    return said.pop()


ROWS: list[tuple[str, dict[str, str], Pick]] = [
    ("default", {}, ("ib0", "192.168.77.1")),
    ("family-inet", {"NCCL_SOCKET_FAMILY": "AF_INET"}, ("ib0", "192.168.77.1")),
    ("family-inet6", {"NCCL_SOCKET_FAMILY": "AF_INET6"}, ("eth0", "fd77::1")),
    ("family-unknown-ignored", {"NCCL_SOCKET_FAMILY": "inet6"}, ("ib0", "192.168.77.1")),
    ("one-character-ignored", {"NCCL_SOCKET_IFNAME": "e"}, ("ib0", "192.168.77.1")),
    ("prefix", {"NCCL_SOCKET_IFNAME": "eth"}, ("eth0", "10.77.1.1")),
    ("prefixes-in-getifaddrs-order", {"NCCL_SOCKET_IFNAME": "ib,eth"}, ("eth0", "10.77.1.1")),
    ("exact", {"NCCL_SOCKET_IFNAME": "=eth0"}, ("eth0", "10.77.1.1")),
    ("exact-prefix-matches-nothing", {"NCCL_SOCKET_IFNAME": "=eth"}, None),
    ("prefix-virbr", {"NCCL_SOCKET_IFNAME": "virbr"}, ("virbr0", "192.168.122.1")),
    ("lo", {"NCCL_SOCKET_IFNAME": "lo"}, ("lo", "127.0.0.1")),
    ("exclude-docker-lo", {"NCCL_SOCKET_IFNAME": "^docker,lo"}, ("eth0", "10.77.1.1")),
    ("exclude-ib-takes-lo", {"NCCL_SOCKET_IFNAME": "^ib"}, ("lo", "127.0.0.1")),
    ("exclude-exact-keeps-docker0", {"NCCL_SOCKET_IFNAME": "^=docker,lo"}, ("docker0", "172.17.0.1")),
    ("exclude-many", {"NCCL_SOCKET_IFNAME": "^docker,lo,eth,ib"}, ("virbr0", "192.168.122.1")),
    ("no-such-name", {"NCCL_SOCKET_IFNAME": "nosuch0"}, None),
    ("ipv6-only-interface", {"NCCL_SOCKET_IFNAME": "=ens5"}, ("ens5", "fd78::5")),
    ("ipv6-only-as-inet6", {"NCCL_SOCKET_IFNAME": "=ens5", "NCCL_SOCKET_FAMILY": "AF_INET6"}, ("ens5", "fd78::5")),
    ("ipv6-only-as-inet", {"NCCL_SOCKET_IFNAME": "=ens5", "NCCL_SOCKET_FAMILY": "AF_INET"}, None),
    ("dual-stack-as-inet6", {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_SOCKET_FAMILY": "AF_INET6"}, ("eth0", "fd77::1")),
    ("link-local-ipv6", {"NCCL_SOCKET_IFNAME": "ens"}, ("ens6", "fe80::6")),
    # NCCL_COMM_ID: the bootstrap takes the first interface in the subnet of its address, NCCL_SOCKET_IFNAME or not
    (
        "comm-id-subnet-over-ifname",
        {"NCCL_COMM_ID": "10.77.1.99:29500", "NCCL_SOCKET_IFNAME": "ib"},
        ("eth0", "10.77.1.1"),
    ),
    ("comm-id-loopback", {"NCCL_COMM_ID": "127.0.0.1:29500"}, ("lo", "127.0.0.1")),
    ("comm-id-ipv6", {"NCCL_COMM_ID": "[fd78::9]:29500", "NCCL_SOCKET_FAMILY": "AF_INET"}, ("ens5", "fd78::5")),
    ("comm-id-link-local-scoped", {"NCCL_COMM_ID": "[fe80::9%ens6]:29500"}, ("ens6", "fe80::6")),
    ("comm-id-link-local-unscoped", {"NCCL_COMM_ID": "[fe80::9]:29500"}, None),
    ("comm-id-no-subnet", {"NCCL_COMM_ID": "10.99.0.1:29500"}, None),
    ("comm-id-no-address", {"NCCL_COMM_ID": ":29500"}, None),
    (
        "inet6-exclude-skips-loopback",
        {"NCCL_SOCKET_IFNAME": "^eth", "NCCL_SOCKET_FAMILY": "AF_INET6"},
        ("ens6", "fe80::6"),
    ),
]


@pytest.mark.parametrize(("env", "expected"), [pytest.param(env, pick, id=name) for name, env, pick in ROWS])
def test_env_predicts_the_interface_real_nccl_bootstraps_on(
    host: Namespace, lib: Path, env: dict[str, str], expected: Pick
) -> None:
    real, answer = real_nccl(host, lib, env)
    check = env_check(host, lib, env)
    assert predicted(check) == real, (check, answer["log"])
    assert real == expected, answer["log"]
    if real is None:  # env's failure quotes NCCL's own words
        assert answer["last_error"] and answer["last_error"] in check["summary"], (check, answer["log"])


def test_interfaces_not_running_are_skipped_by_both(host: Namespace, lib: Path) -> None:
    """ib0 down (and virbr0, its veth peer, without carrier): neither is RUNNING, so NCCL >= 2.28 passes over
    them; the default then takes eth0. NCCL_COMM_ID's subnet match takes ib0 all the same."""
    host.set("ib0", "down")
    try:
        real, answer = real_nccl(host, lib, {})
        assert predicted(env_check(host, lib, {})) == real == ("eth0", "10.77.1.1"), answer["log"]
        real, answer = real_nccl(host, lib, {"NCCL_SOCKET_IFNAME": "=ib0"})
        assert real is None and answer["last_error"] == "Bootstrap : no socket interface found", answer["log"]
        assert predicted(env_check(host, lib, {"NCCL_SOCKET_IFNAME": "=ib0"})) is None
        # NCCL_COMM_ID's subnet match does not ask whether the interface runs
        real, answer = real_nccl(host, lib, {"NCCL_COMM_ID": "192.168.77.9:29500"})
        assert predicted(env_check(host, lib, {"NCCL_COMM_ID": "192.168.77.9:29500"})) == real, answer["log"]
        assert real == ("ib0", "192.168.77.1"), answer["log"]
    finally:
        host.set("ib0", "up")
