"""The watch agent and the job-wide viewer as processes: recorded lines through the CLI, bad flags,
the agent's life on a real job, the fan-out's end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from agent_feeds import lines_of, node_state
from conftest import WORKERS
from test_watch_real import stop_tree
from watch_states import sample, stack

from ncclcheck.model.agent_line import agent_line
from ncclcheck.model.stacks import Frame

# Its agents are found by their command line, as test_watch_nodes' are: one xdist worker runs both.
pytestmark = pytest.mark.xdist_group("agents_and_test_hosts")


WORKER = WORKERS / "watch_job.py"


def cli(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ncclcheck", "watch", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
        cwd=cwd,
    )


@pytest.mark.integration
def test_recorded_agent_lines_replay_through_the_cli(tmp_path: Path) -> None:
    node0 = node_state(0, r1=sample(1, stack(None, 41, "load_batch")))
    recorded = tmp_path / "agents.jsonl"
    recorded.write_text("\n".join(lines_of(node0, "node0") + lines_of(node_state(1), "node1")) + "\n")
    done = cli("--agents", str(recorded), "--json")
    seen = json.loads(done.stdout)
    assert done.returncode == 1 and seen["schema"] == "ncclcheck.watch/2"
    assert [(f["kind"], f["culprits"]) for f in seen["findings"]] == [("straggler", [1])]
    assert [n["host"] for n in seen["nodes"]] == ["node0", "node1"] and len(seen["ranks"]) == 4
    piped = cli("--agents", "-", stdin=recorded.read_text())
    assert piped.returncode == 1 and "rank 1 on node0" in piped.stdout
    # Files still being written (every node's `ncclcheck run` dir), followed live: a glob, tail -F, no tail left.
    files = {host: tmp_path / host / "agents.jsonl" for host in ("node0", "node1")}
    for path in files.values():
        path.parent.mkdir()
    writing = threading.Event()

    def write() -> None:  # each node's run writes a line a second, as long as the viewer looks
        sent: dict[str, dict[int, tuple[Frame, ...]]] = {"node0": {}, "node1": {}}
        seq = 0
        while not writing.is_set():
            for host, state in (("node0", node0), ("node1", node_state(1))):
                with files[host].open("a") as handle:
                    handle.write(json.dumps(agent_line(state, host, sent[host], time.time(), seq)) + "\n")
            seq += 1
            writing.wait(1.0)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        followed = cli("--agents", str(tmp_path / "*" / "agents.jsonl"), "--follow", "--json", "--stall", "4")
    finally:
        writing.set()
        writer.join()
    seen = json.loads(followed.stdout)
    assert [(f["kind"], f["culprits"]) for f in seen["findings"]] == [("straggler", [1])], seen["findings"]
    assert [(n["host"], n["agent"]) for n in seen["nodes"]] == [("node0", "ok"), ("node1", "ok")]
    assert not any(str(tmp_path) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


@pytest.mark.integration
def test_bad_multi_node_flags_get_one_line_and_exit_2(tmp_path: Path) -> None:
    cases = {
        ("--agents", str(tmp_path / "nope")): "no such file",
        ("--fanout", "x", "--agents", "y"): "give one",
        ("--fanout", "x", "--pid", "1"): "--job ID",
        ("--agent-cmd", "python"): "--slurm or --fanout",
        ("--agents", "-", "--follow"): "--follow is for --agents FILE",
        ("--agents", str(tmp_path / "none*.jsonl"), "--follow"): "no such file",
    }
    for args, words in cases.items():
        done = cli(*args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    done = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "watch", "--slurm", "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "job id" in done.stderr


@pytest.mark.integration
def test_the_agent_on_a_real_job_ends_when_its_stdin_closes_and_on_sigterm(tmp_path: Path) -> None:
    log = (tmp_path / "job.log").open("w")
    job_proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-port=29561", str(WORKER)],
        env={**os.environ, "MODE": "straggler"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (tmp_path / "job.log").read_text().count("ready") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for ending in ("stdin", "sigterm"):
            agent = subprocess.Popen(
                [sys.executable, "-m", "ncclcheck", "watch", "--agent", "--pid", str(job_proc.pid)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert agent.stdout is not None and agent.stdin is not None
            first = json.loads(agent.stdout.readline())
            assert first["schema"] == "ncclcheck.watch-agent/3" and [r["rank"] for r in first["ranks"]] == [0, 1]
            assert all(r["stack"] for r in first["ranks"])
            if ending == "stdin":
                agent.stdin.close()
            else:
                agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=30) == 0, ending
            agent.stdout.close()
            if agent.stdin and not agent.stdin.closed:
                agent.stdin.close()
    finally:
        stop_tree(job_proc)  # torchrun puts each rank in its own session: the group alone leaves them behind
        log.close()


@pytest.mark.integration
def test_an_agent_with_no_job_says_so_in_one_line(tmp_path: Path) -> None:
    done = cli("--agent", "--job", "no-such-job-id")
    line = json.loads(done.stdout)
    assert done.returncode == 3 and line["ranks"] == [] and "no job no-such-job-id found" in line["error"]


@pytest.mark.integration
def test_closing_the_fanout_ends_a_stopped_member_even_after_the_command_exited() -> None:
    from ncclcheck.collectors.agent_streams import FanOut

    fan = FanOut("sleep 300 & echo $!; kill -STOP $!; exec sleep 300", shell=True)
    deadline = time.monotonic() + 30
    while not fan.streams.text:
        assert time.monotonic() < deadline, "the fan-out printed nothing"
        time.sleep(0.05)
    member = int(next(iter(fan.streams.text.values()))[0])
    fan.close(grace_s=0.5)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{member}"):
        with open(f"/proc/{member}/stat") as handle:
            if handle.read().split(")")[1].split()[0] == "Z":
                break  # dead, waiting for init to reap it
        assert time.monotonic() < deadline, "a stopped member of the fan-out was left behind"
        time.sleep(0.05)
