"""``ncclcheck watch`` on each node of a real 2-node torchrun/gloo job, the nodes being test hosts that cannot see
each other's processes (own network, PID, mount and UTS namespaces): a node's view never blames the network
for a rank it cannot see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from netns import Host, two_hosts

WORKER = Path(__file__).parent / "workers" / "watch_job.py"


def start(host: Host, node: int, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MODE": "straggler", "STUCK_RANK": "1", "GLOO_SOCKET_IFNAME": f"h{node}"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=2",
           "--master-addr=node0", "--master-port=29544", "--monitor-interval=600", str(WORKER)]  # fmt: skip
    return host.popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def watch(host: Host) -> tuple[int, dict[str, Any]]:
    done = host.run(
        [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--stall", "4"], env=dict(os.environ)
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_each_node_tells_what_it_can_see_of_a_straggler_on_node0(tmp_path: Path) -> None:
    """Rank 1 (node0) sits in its data loader; ranks 0, 2 and 3 wait in all_reduce."""
    with two_hosts() as hosts:
        logs = [tmp_path / f"node{i}.log" for i in (0, 1)]
        for i, host in enumerate(hosts):
            start(host, i, logs[i])
        deadline = time.monotonic() + 120
        while sum(log.read_text(errors="replace").count("ready") for log in logs) < 4:
            assert time.monotonic() < deadline, "\n".join(log.read_text(errors="replace") for log in logs)
            time.sleep(0.2)
        code0, node0 = watch(hosts[0])
        code1, node1 = watch(hosts[1])
    assert node0["job"]["local_ranks"] == [0, 1] and node1["job"]["local_ranks"] == [2, 3]
    assert code0 == 1 and [(f["kind"], f["culprits"]) for f in node0["findings"]] == [("straggler", [1])]
    kinds1 = [f["kind"] for f in node1["findings"]]
    assert code1 == 1 and kinds1 == ["waiting-remote"], node1["findings"]
    remote = node1["findings"][0]
    assert remote["culprits"] == [] and remote["ranks"] == [2, 3]
    assert "rank 0-1 run on other nodes" in remote["message"] and "stalled" not in json.dumps(node1)
