"""``ncclcheck smoke --isolate`` on four test hosts (network, PID, mount and UTS namespaces on one bridge): the
same command on every host, as the two-node smoke tests run it; node 0's report names the planted fault."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from netns import Host, bridged_hosts
from test_smoke import no_orphans

# its own group: four test hosts on their own bridge and subnet (10.79.0), apart from the two-host tests' (10.78.0)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("isolate_hosts")]

NODES = 4
QUICK = ["--backend", "gloo", "--nproc", "1", "--sizes", "256K", "--iters", "3", "--warmup", "1", "--timeout", "15"]


def isolate(
    tmp: Path, plant: Callable[[list[Host]], None], env: dict[int, dict[str, str]] | None = None
) -> tuple[list[int], str, dict[str, Any]]:
    with bridged_hosts(NODES) as hosts:
        plant(hosts)
        procs = []
        for i, host in enumerate(hosts):
            cmd = [sys.executable, "-m", "ncclcheck", "smoke", "--isolate", *QUICK, "--nodes", str(NODES)]
            cmd += ["--node-rank", str(i), "--master-addr", "node0", "--master-port", "29611"]
            cmd += ["--log-dir", str(tmp / f"node{i}"), "--json", str(tmp / f"node{i}.json")]
            run_env = {**os.environ, **(env or {}).get(i, {})}
            procs.append(host.popen(cmd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs = [p.communicate(timeout=900)[0] for p in procs]
    no_orphans()
    return [p.returncode for p in procs], "\n".join(outs), json.loads((tmp / "node0.json").read_text())


def test_a_rate_limited_host_is_named(tmp_path: Path) -> None:
    def slow_node3(hosts: list[Host]) -> None:  # tbf: this kernel has it (not netem)
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                hosts[3].ns.name,
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                "8mbit",
                "burst",
                "32kbit",
                "latency",
                "400ms",
            ],
            check=True,
        )

    codes, out, report = isolate(tmp_path, slow_node3)
    assert report["verdict"]["kind"] == "node" and report["verdict"]["nodes"] == [3], out
    assert report["verdict"]["hosts"] == ["node3"] and codes[0] == 1
    # every group holding node 3 is many times slower than every group without it (those may fall under the
    # floor too on a loaded machine: busbw noise, which the plan weighs; the fault's groups stand apart)
    groups = [g for s in report["stages"] for g in s["groups"] if len(g["nodes"]) > 1]
    with3 = [bw for g in groups if 3 in g["nodes"] for bw in g["busbw_gbps"].values()]
    without = [bw for g in groups if 3 not in g["nodes"] for bw in g["busbw_gbps"].values()]
    assert with3 and without and max(with3) * 4 < min(without), out
    assert all("send_recv" not in g["busbw_gbps"] for g in groups)  # gloo's send_recv: verified, busbw not judged
    assert report["runs"] == len(report["stages"]) <= 5  # alone, pairs, swap, confirm (+ again, if only slow)


def test_a_healthy_set_names_nobody(tmp_path: Path) -> None:
    codes, out, report = isolate(tmp_path, lambda hosts: None)
    assert report["verdict"]["kind"] == "healthy" and report["verdict"]["nodes"] == [], out
    assert codes == [0] * NODES, out
    # a group may run under the floor once on a loaded machine (measured: 0+1's all_gather at 0.019 GB/s against
    # 0.033, its swaps several times faster): it completed, and the healthy verdict names it; no group failed
    slow = [g for s in report["stages"] for g in s["groups"] if not g["passed"]]
    assert all(g["completed"] and g["slow"] for g in slow), out
    for g in slow:
        assert f"nodes {'+'.join(map(str, g['nodes']))} were under the floor once" in report["verdict"]["message"], out


def test_a_dropped_link_is_named(tmp_path: Path) -> None:
    def drop_1_3(hosts: list[Host]) -> None:  # no iptables here: a blackhole route drops node1 <-> node3 both ways
        hosts[1].ns.ip("route", "add", "blackhole", "10.79.0.4/32")
        hosts[3].ns.ip("route", "add", "blackhole", "10.79.0.2/32")

    codes, out, report = isolate(tmp_path, drop_1_3)
    assert report["verdict"]["kind"] == "link" and report["verdict"]["nodes"] == [1, 3], out
    assert report["verdict"]["hosts"] == ["node1", "node3"] and codes[0] == 1
    # only groups across the dropped link did not complete (a group without it may fall under the busbw floor on
    # a loaded machine: noise, which the plan weighs; measured: 2+3 at 0.045 GB/s in a swap against a 0.149 floor)
    failed = [g for s in report["stages"] for g in s["groups"] if not g["completed"]]
    assert failed and all({1, 3} <= set(g["nodes"]) for g in failed), out
    # alone, pairs, boundary, cross (+ a swap), a confirm per end (+ one again, where a rest was only slow once)
    assert report["runs"] == len(report["stages"]) <= 8
    # which stages the plan runs depends on which groups failed hard first (CI: pairs and cross named the link with
    # no boundary stage); in whichever stage a group across the link failed:
    for group in failed:
        if "ended early" in group["reason"]:  # one end died at once (connect: Invalid argument): the rest were ended
            # the one seen first may be a member whose peer at an end died ("Connection closed by peer"): seen, in
            # order of the polls, not of the deaths; an end is in the reason either way: its own failure (a rank
            # died, or (CI) the end whose store sat across the link never started its ranks: "could not reach the
            # c10d store"), or, where the member seen first took every other down before an end's failure was
            # posted (a clean clone under load), that member's peer that closed the connection: an end's address
            # (node 1 is 10.79.0.2, node 3 10.79.0.4)
            own = re.search(r"node [13]: (?!ended early)", group["reason"])
            assert own or re.search(r"closed by peer \[10\.79\.0\.[24]\]", group["reason"]), out
            assert "failed first" in group["reason"], out


def test_a_host_with_a_wrong_gloo_interface_is_named(tmp_path: Path) -> None:
    # Node 2's GLOO_SOCKET_IFNAME names a NIC it does not have (ib0, as copied from another cluster's config).
    # Measured on these hosts (torch 2.13 cpu): gloo on lo or on an unrouted docker0 bridge is no fault, every
    # group with node 2 completed (gloo reached its peers over eth0), so it is not planted: nothing to find.
    codes, out, report = isolate(tmp_path, lambda hosts: None, env={2: {"GLOO_SOCKET_IFNAME": "ib0"}})
    assert report["verdict"]["kind"] == "node" and report["verdict"]["nodes"] == [2], out
    assert report["verdict"]["hosts"] == ["node2"] and codes[0] == 1
    failed = [g for s in report["stages"] for g in s["groups"] if not g["passed"]]
    assert failed == [g for g in report["stages"][0]["groups"] if g["nodes"] == [2]], out  # alone, nobody else
    assert "ib0" in failed[0]["reason"], out  # the reason names the missing interface


def test_ctrl_c_on_every_node_ends_its_stage_and_leaves_no_process(tmp_path: Path) -> None:
    """Two hosts, node 1's veth at 8 kbit/s: the pairs stage starts and stalls in its transfers. ^C (SIGINT to each
    node's ncclcheck, as a terminal sends it) ends each node's stage: its smoke, torchrun and rank, exit 130."""
    import psutil

    def ours() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]

    with bridged_hosts(2) as hosts:
        tbf = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "8kbit", "burst", "32kbit", "latency", "4s"]
        subprocess.run(["ip", "netns", "exec", hosts[1].ns.name, *tbf], check=True)
        procs = []
        for i, host in enumerate(hosts):
            cmd = [sys.executable, "-m", "ncclcheck", "smoke", "--isolate", *QUICK, "--nodes", "2"]
            cmd += ["--node-rank", str(i), "--master-addr", "node0", "--master-port", "29631"]
            cmd += ["--log-dir", str(tmp_path / f"node{i}")]
            procs.append(host.popen(cmd, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("node*/stage1-pairs/smoke-*")) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), [p.communicate()[0] for p in procs]
            time.sleep(0.5)
        time.sleep(3)  # the stage's torchrun and rank are up, stalled in the slow link
        nodes = [p for p in ours() if "--isolate" in p.info["cmdline"] and p.info["cmdline"][0] != "nsenter"]
        assert len(nodes) == 2 and len(ours()) > 2, [p.info["cmdline"] for p in ours()]
        for p in nodes:
            p.send_signal(signal.SIGINT)
        outs = [p.communicate(timeout=120)[0] for p in procs]
        left = [p.info["cmdline"] for p in ours()]  # before the hosts end (that would end whatever is left)
    assert [p.returncode for p in procs] == [130, 130], outs
    assert all("ended by SIGINT" in out for out in outs), outs
    assert not left, left
