"""``ncclcheck smoke --nodes 2``: two "nodes" in two network (and UTS) namespaces joined by a veth pair."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from netns import Namespace, namespaces
from test_smoke import no_orphans

# Two test hosts (or a SLURM cluster) each run a whole job, and watch agents are found by their command line:
# one such test at a time, on one xdist worker (the group is shared with test_watch_agents and test_run).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("agents_and_test_hosts")]

QUICK = ["--backend", "gloo", "--nproc", "1", "--sizes", "8:2K", "--iters", "2", "--warmup", "0"]
ADDRS = ("10.77.0.1", "10.77.0.2")


@contextmanager
def two_nodes() -> Iterator[list[Namespace]]:
    """node0 and node1: own hostname (resolvable through /etc/netns/<ns>/hosts), own address, one link."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux `unshare` is needed to give each test node its own hostname")
    with namespaces(2) as nodes:
        nodes[0].veth("v0", "v1", nodes[1])
        for i, ns in enumerate(nodes):
            ns.addr(f"v{i}", f"{ADDRS[i]}/24")
            ns.set("lo", "up")
            etc = Path("/etc/netns") / ns.name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ADDRS[0]} node0\n{ADDRS[1]} node1\n")
        try:
            yield nodes
        finally:
            for ns in nodes:
                shutil.rmtree(Path("/etc/netns") / ns.name, ignore_errors=True)


def start_node(
    ns: Namespace, rank: int, tmp: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ncclcheck", "smoke", *QUICK, "--nodes", "2", "--node-rank", str(rank)]
    cmd += ["--master-addr", "node0", "--master-port", "29533", "--log-dir", str(tmp / f"node{rank}")]
    cmd += ["--json", str(tmp / f"node{rank}.json"), *extra]
    script = f"hostname node{rank} && exec {' '.join(cmd)}"
    return ns.popen(
        ["unshare", "--uts", "sh", "-c", script],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def run_nodes(tmp: Path, *extra: str, env1: dict[str, str] | None = None) -> list[tuple[int, str, dict[str, Any]]]:
    with two_nodes() as nodes:
        procs = [start_node(nodes[0], 0, tmp, *extra), start_node(nodes[1], 1, tmp, *extra, env=env1)]
        outs = [p.communicate(timeout=180)[0] for p in procs]
    return [
        (p.returncode, out, json.loads((tmp / f"node{i}.json").read_text()))
        for i, (p, out) in enumerate(zip(procs, outs))
    ]


def test_two_nodes_pass_and_compare_fingerprints(tmp_path: Path) -> None:
    (code0, out0, job), (code1, out1, node1) = run_nodes(tmp_path, env1={"NCCL_IB_DISABLE": "1"})
    assert code0 == 0 and code1 == 0, out0 + out1
    assert job["scope"] == "job" and job["world_size"] == 2 and job["nodes"] == 2 and job["verdict"] == "pass"
    assert all(r["status"] == "ok" and r["wrong"] == 0 for r in job["results"]) and len(job["results"]) == 46
    assert {(f["host"], f["socket_ifname"]) for f in job["fingerprints"]} == {
        ("node0", "v0(10.77.0.1)"),
        ("node1", "v1(10.77.0.2)"),
    }
    findings = {f["id"]: f for f in job["findings"]}
    # The launcher set GLOO_SOCKET_IFNAME per node (v0, v1): not the user's setting, so never reported as one.
    assert not [f for f in job["findings"] if "GLOO_SOCKET_IFNAME" in f["message"]]
    ib = next(f for f in job["findings"] if "NCCL_IB_DISABLE" in f["message"])
    assert ib["severity"] == "warning" and ib["ranks"] == [1]
    assert "fingerprint-interface" not in findings
    assert node1["scope"] == "node" and node1["verdict"] == "pass" and len(node1["results"]) == 46
    assert "node1" in out1 and "verified on this node" in out1
    no_orphans()


def test_two_nodes_hang_is_named_on_both_nodes(tmp_path: Path) -> None:
    (code0, out0, job), (code1, out1, node1) = run_nodes(
        tmp_path, "--ops", "broadcast,all_reduce", "--timeout", "4", "--drill", "hang@1:all_reduce"
    )
    assert code0 == 1 and code1 == 1, out0 + out1
    assert node1["hang"]["culprits"] == [1] and node1["hang"]["ranks"]["1"]["state"] == "not_in_collective"
    # Node 0 gathered node 1's diagnosis through the rendezvous store: the job report names rank 1 and its stack.
    assert job["hang"]["op"] == "all_reduce" and job["hang"]["ranks"]["0"]["state"] == "in_collective"
    assert job["hang"]["culprits"] == [1] and job["hang"]["ranks"]["1"]["state"] == "not_in_collective", out0 + out1
    assert "drill_hang" in job["hang"]["ranks"]["1"]["call_site"]
    no_orphans()
