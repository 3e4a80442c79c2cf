"""Agent lines and their job-wide merge (pure), the viewer's flags, and the agent's life on a real job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_watch_real import stop_tree
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.collectors.agent_commands import agent_command, fanout_command, slurm_command
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.model.agent_line import agent_line
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RendezvousEndpoint, RendezvousMap, RendezvousNode, WatchState

# Its agents are found by their command line, as test_watch_nodes' are: one xdist worker runs both.
pytestmark = pytest.mark.xdist_group("agents_and_test_hosts")

WORKER = Path(__file__).parent / "workers" / "watch_job.py"
NOW = 1_800_000_000.0


def node_state(node: int, **odd: Any) -> WatchState:
    """Node ``node`` of a 2-node, 4-rank job: its two ranks in all_reduce for 12 s, but for ``odd``."""
    j = job(4, 2, node)
    first = 2 * node
    rounds = [all_in(first + 2, "all_reduce", first=first, **odd) for _ in range(4)]
    return states(j, *rounds, every=4.0, stall=10.0)


def lines_of(state: WatchState, host: str, times: int = 1, at: float = NOW) -> list[str]:
    sent: dict[int, tuple[Frame, ...]] = {}
    return [json.dumps(agent_line(state, host, sent, at + i, i)) for i in range(times)]


def merged(streams: Streams, now: float = NOW + 1, started: bool = True, nodes: int | None = None) -> WatchState:
    return merge(streams.reports, streams.text, now, Judging(10.0), 1.5, started, nodes)


def feed(*pairs: tuple[WatchState, str], received: float = NOW) -> Streams:
    streams = Streams()
    for state, host in pairs:
        for line in lines_of(state, host):
            streams.add_line(f"{host}: {line}\n", received)
    return streams


def test_a_line_carries_a_stack_only_when_it_changed_and_labels_are_accepted() -> None:
    state = node_state(0)
    first, second = lines_of(state, "node0", times=2)
    assert "stack" in first and '"stack"' not in second
    streams = Streams()
    streams.add_line(f"node0: {first}\n", NOW)
    streams.add_line(f"[pod/trainer-0] {second}\n", NOW + 1)
    views = streams.reports["node0"].views
    assert [v.sample.stack for v in views] == [v.sample.stack for v in state.ranks]
    assert [(v.rank, v.collective, v.quiet_s) for v in views] == [
        (v.rank, v.collective, round(v.quiet_s, 2)) for v in state.ranks
    ]


def test_an_unchanged_rank_costs_a_few_hundred_bytes() -> None:
    j = job(8)
    state = states(j, *[all_in(8, "all_reduce") for _ in range(3)])
    _, again = lines_of(state, "node0", times=2)
    assert len(again) / 8 < 600, len(again) / 8


def test_a_straggler_on_one_node_is_named_with_its_host_and_nobody_blames_the_network() -> None:
    node0 = node_state(0, r1=sample(1, stack(None, 41, "load_batch")))
    state = merged(feed((node0, "node0"), (node_state(1), "node1")))
    assert [(f.id, f.culprits) for f in state.findings] == [("straggler", (1,))]
    assert "rank 1 on node0 is not in any collective" in state.findings[0].message
    assert [(n.host, n.agent, n.ranks) for n in state.nodes] == [("node0", "ok", (0, 1)), ("node1", "ok", (2, 3))]


def test_every_rank_seen_in_one_collective_is_stalled_but_not_while_a_node_is_silent() -> None:
    both = merged(feed((node_state(0), "node0"), (node_state(1), "node1")))
    assert [f.id for f in both.findings] == ["stalled"]
    streams = feed((node_state(0), "node0"))
    streams.reports["node1"] = feed((node_state(1), "node1"), received=NOW - 60).reports["node1"]
    state = merged(streams)
    kinds = [f.id for f in state.findings]
    assert "stalled" not in kinds and kinds[0] == "node-silent", state.findings
    silent = state.findings[0]
    assert silent.ranks == (2, 3) and "node 1 (node1)" in silent.message and "61 s" in silent.message
    assert "waiting-remote" in kinds and [n.agent for n in state.nodes] == ["ok", "silent"]


def test_a_node_that_never_reports_is_missing_with_the_fanout_s_words_but_not_while_starting() -> None:
    streams = feed((node_state(0), "node0"))
    streams.add_line("node1: ssh: connect to host node1 port 22: No route to host\n", NOW)
    starting = merged(streams, started=False)
    assert all(f.id != "node-missing" for f in starting.findings)
    state = merged(streams)
    missing = [f for f in state.findings if f.id == "node-missing"]
    assert len(missing) == 1 and missing[0].ranks == (2, 3) and "No route to host" in missing[0].message
    assert "1 of 2 nodes" in missing[0].message and "stalled" not in [f.id for f in state.findings]


def test_an_agent_that_finds_no_job_makes_its_node_unreachable_with_its_words() -> None:
    streams = feed((node_state(0), "node0"))
    error = agent_line(None, "node1", {}, NOW, 0, error="no torch distributed job found on this node")
    streams.add_line(json.dumps(error), NOW)
    state = merged(streams)
    assert any(
        f.id == "node-unreachable" and "node1: its agent could not watch: no torch" in f.message for f in state.findings
    ), state.findings
    assert [n.agent for n in state.nodes] == ["ok", "unreachable"]


def test_no_agent_at_all_is_said_never_healthy() -> None:
    streams = Streams()
    streams.add_line("bash: ncclcheck: command not found\n", NOW)
    state = merged(streams)
    assert [f.id for f in state.findings] == ["node-missing"] and "command not found" in state.findings[0].message
    assert state.verdict.status == "problem"


def test_healthy_nodes_give_no_finding() -> None:
    def moving(node: int) -> WatchState:
        j = job(4, 2, node)
        rounds = [
            {r: sample(r, stack("all_reduce", 88 + i % 2), net=i * 10**6) for r in (2 * node, 2 * node + 1)}
            for i in range(4)
        ]
        return states(j, *rounds, every=1.5)

    state = merged(feed((moving(0), "node0"), (moving(1), "node1")))
    assert state.findings == () and state.verdict.status == "ok"


def test_fanout_and_slurm_command_lines() -> None:
    agent = agent_command(1.5, 10.0, "job 1", False, False, None)
    assert agent[:3] == [sys.executable, "-m", "ncclcheck"] and agent[3:5] == ["watch", "--agent"]
    assert fanout_command("ssh {} &", ["py", "a b"]) == "ssh py 'a b' &"
    assert fanout_command("pdsh -w n[1-2]", ["py", "-m"]) == "pdsh -w n[1-2] py -m"
    assert agent_command(1.5, 10.0, None, False, False, "/opt/venv/bin/python -m ncclcheck")[:3] == [
        "/opt/venv/bin/python",
        "-m",
        "ncclcheck",
    ]
    os.environ.update(SLURM_JOB_ID="5", SLURM_NNODES="1", SLURM_STEP_ID="0", SLURM_CONF="/etc/slurm/slurm.conf")
    try:
        argv, env = slurm_command("81234", 16, ["py", "-m", "ncclcheck"])
    finally:
        for key in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_STEP_ID", "SLURM_CONF"):
            os.environ.pop(key)
    assert argv[:6] == [
        "srun",
        "--jobid=81234",
        "--overlap",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        "--input=all",
    ]
    assert "--nodes=16" in argv and argv[-3:] == ["py", "-m", "ncclcheck"]
    assert not any(k.startswith("SLURM_") and k != "SLURM_CONF" for k in env) and env["SLURM_CONF"]


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
            assert first["schema"] == "ncclcheck.watch-agent/2" and [r["rank"] for r in first["ranks"]] == [0, 1]
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


def test_a_node_whose_launcher_died_under_running_ranks_is_a_warning_but_not_once_they_exited() -> None:
    from dataclasses import replace

    node0 = node_state(0, r1=sample(1, stack(None, 41, "load_batch")))
    streams = feed((node0, "node0"), (node_state(1), "node1"))
    streams.reports["node1"] = replace(streams.reports["node1"], launcher_running=False)
    state = merged(streams)
    assert [(f.id, f.ranks) for f in state.findings] == [("straggler", (0, 1, 2, 3)), ("launcher-gone", (2, 3))]
    assert state.findings[1].culprits == () and "node1: the job's launcher" in state.findings[1].message
    gone = node_state(1, r2=sample(2, (), status="gone"), r3=sample(3, (), status="gone"))
    ended = feed((node0, "node0"), (gone, "node1"))
    ended.reports["node1"] = replace(ended.reports["node1"], launcher_running=False)
    assert all(f.id != "launcher-gone" for f in merged(ended).findings)


def mapped(*nodes: tuple[int, float | None, bool], error: str | None = None) -> RendezvousMap:
    """torchrun's map: (node rank, heartbeat age, removed) per node."""
    return RendezvousMap(
        "node0:29400", "job", 0, tuple(RendezvousNode(f"node{r}", r, 7, age, gone) for r, age, gone in nodes), error
    )


def with_map(streams: Streams, rdzv: RendezvousMap) -> WatchState:
    return merge(streams.reports, streams.text, NOW + 1, Judging(10.0), 1.5, True, None, rdzv)


def test_a_node_without_an_agent_is_named_from_the_rendezvous_and_down_only_when_its_heartbeat_stopped() -> None:
    streams = feed((node_state(0), "node0"))
    beating = with_map(streams, mapped((0, 2.0, False), (1, 4.0, False)))
    missing = [f for f in beating.findings if f.id == "node-missing"]
    assert len(missing) == 1 and missing[0].message.startswith("node 1 (node1): no agent output")
    assert "torchrun runs there, so the agent did not start" in missing[0].message
    assert "down or wedged" not in missing[0].message and "fan-out" in missing[0].fix
    assert [(n.host, n.agent, n.address) for n in beating.nodes] == [
        ("node0", "ok", "node0"),
        ("node1", "missing", "node1"),
    ]
    stopped = with_map(streams, mapped((0, 2.0, False), (1, 312.0, False)))
    message = next(f.message for f in stopped.findings if f.id == "node-missing")
    assert "heartbeat is 312 s old: the node is down or wedged" in message
    # Clocks skewed by 100 s write every heartbeat: a node as fresh as the others is never called down.
    late = with_map(streams, mapped((0, 2.0, False), (1, 12.0, False)))
    message = next(f.message for f in late.findings if f.id == "node-missing")
    assert "12 s old (the freshest node's is 2 s old): late, not yet stopped" in message
    assert "torchrun runs there" not in message and "down or wedged" not in message
    skewed = with_map(streams, mapped((0, 102.0, False), (1, 104.0, False)))
    assert "down or wedged" not in json.dumps([f.message for f in skewed.findings])
    assert all(f.id != "stalled" for s in (beating, stopped, skewed) for f in s.findings)


def test_a_node_dropped_from_the_rendezvous_is_named_without_a_guess_at_why() -> None:
    streams = feed((node_state(0), "node0"))
    remembered = with_map(streams, mapped((0, 1.0, False), (1, 40.0, True)))
    message = next(f.message for f in remembered.findings if f.id == "node-missing")
    assert message.startswith("node 1 (node1): no agent output; torchrun's rendezvous no longer lists it")
    assert "last heartbeat 40 s ago" in message and "down or wedged" not in message
    # A viewer that never saw node 1 in the map: the job's node count says it existed.
    silent = feed((node_state(0), "node0"))
    silent.reports["node1"] = feed((node_state(1), "node1"), received=NOW - 60).reports["node1"]
    dropped = with_map(silent, mapped((0, 1.0, False)))
    message = next(f.message for f in dropped.findings if f.id == "node-silent")
    assert "torchrun's rendezvous no longer lists node 1" in message and "down or wedged" not in message, message
    never = with_map(streams, mapped((0, 1.0, False)))
    message = next(f.message for f in never.findings if f.id == "node-missing")
    assert message.startswith("node 1: no agent output; torchrun's rendezvous no longer lists node 1"), message


def test_both_nodes_reporting_give_no_node_finding_whatever_the_map_says_and_a_failed_read_is_a_note() -> None:
    streams = feed((node_state(0), "node0"), (node_state(1), "node1"))
    fine = with_map(streams, mapped((0, 1.0, False), (1, 2.0, False)))
    assert [f.id for f in fine.findings] == ["stalled"]
    assert [n.heartbeat_age_s for n in fine.nodes] == [1.0, 2.0]
    failed = with_map(streams, mapped(error="the rendezvous store at node0:29400 could not be read: refused"))
    assert [f.id for f in failed.findings] == ["stalled"]
    assert any("rendezvous map is not known" in n for n in failed.notes)


def test_the_rendezvous_state_decoder_admits_only_its_own_classes() -> None:
    import base64
    import datetime
    import pickle

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    from ncclcheck.collectors.rendezvous import decode, endpoint_of

    state = _RendezvousState()
    now = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.timezone.utc)
    a, b = _NodeDesc("10.1.0.3", 11, 0), _NodeDesc("10.1.0.4", 12, 0)
    state.participants = {a: 0, b: 1}
    state.last_heartbeats = {a: now - datetime.timedelta(seconds=2), b: now - datetime.timedelta(seconds=312)}
    state.wait_list = {a}
    got = decode(base64.b64encode(pickle.dumps(state)), now)
    assert not isinstance(got, str)
    assert [(n.addr, n.node_rank, n.agent_pid, n.heartbeat_age_s) for n in got[1]] == [
        ("10.1.0.3", 0, 11, 2.0),
        ("10.1.0.4", 1, 12, 312.0),
    ]
    evil = base64.b64encode(pickle.dumps(os.system))
    refused = decode(evil, now)
    assert isinstance(refused, str) and "posix.system is not part of a rendezvous state" in refused
    assert decode(b"Y2FuaW1hZGFt", now) == "the rendezvous has no state yet (no node has joined)"
    garbled = decode(b"%%%", now)
    assert isinstance(garbled, str) and garbled.startswith("the rendezvous state could not be decoded")
    line = ["torchrun", "--nnodes=2", "--rdzv_backend", "c10d", "--rdzv-endpoint=node0", "--rdzv-id=j7", "train.py"]
    assert endpoint_of(line) == RendezvousEndpoint("node0", 29400, "j7")
    assert endpoint_of(["torchrun", "--master-addr=node0", "--master-port=29500", "train.py"]) is None
    assert endpoint_of(["torchrun", "--standalone", "--rdzv-backend=c10d", "train.py"]) is None


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


def test_an_agent_that_writes_every_5_s_is_silent_after_4_of_its_intervals_not_the_viewer_s() -> None:
    streams = feed((node_state(0), "node0"))
    line = agent_line(node_state(1), "node1", {}, NOW, 0, interval_s=5.0)
    streams.add_line(json.dumps(line) + "\n", NOW)
    # 12 s: node1 missed two of its 5 s lines (not silent yet); node0's agent said no interval: 10 s is its limit.
    quiet = merge(streams.reports, streams.text, NOW + 12, Judging(10.0), 1.5)
    assert [n.agent for n in quiet.nodes] == ["silent", "ok"], quiet.nodes
    gone = merge(streams.reports, streams.text, NOW + 21, Judging(10.0), 1.5)
    assert [n.agent for n in gone.nodes] == ["silent", "silent"]


def test_a_missing_node_is_named_from_slurm_only_when_the_names_line_up() -> None:
    streams = feed((node_state(0), "gpu-0411"))
    named = merge(streams.reports, streams.text, NOW + 1, Judging(10.0), 1.5, True, 2, None, ("gpu-0411", "gpu-0412"))
    missing = [f for f in named.findings if f.id == "node-missing"]
    assert len(missing) == 1 and missing[0].message.startswith("gpu-0412: no agent output"), missing
    # Agents in containers name their host otherwise: a count, never a healthy node called missing.
    odd = merge(streams.reports, streams.text, NOW + 1, Judging(10.0), 1.5, True, 2, None, ("n1", "n2"))
    missing = [f for f in odd.findings if f.id == "node-missing"]
    assert len(missing) == 1 and missing[0].message.startswith("1 of 2 nodes sent no agent output"), missing
    both = feed((node_state(0), "gpu-0411.cluster"), (node_state(1), "gpu-0412"))
    full = merge(both.reports, both.text, NOW + 1, Judging(10.0), 1.5, True, 2, None, ("gpu-0411", "gpu-0412"))
    assert all(f.id != "node-missing" for f in full.findings)
