"""Agent lines and their job-wide merge, and the viewer's flags (the agent's life on a real job:
tests/integration/watch/test_watch_agents_integration.py)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from agent_feeds import NOW, feed, lines_of, merged, node_state
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.collectors.agent_commands import agent_command, fanout_command, slurm_command
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.model.agent_line import agent_line
from ncclcheck.model.watch import RendezvousEndpoint, RendezvousMap, RendezvousNode, WatchState

# Its agents are found by their command line, as test_watch_nodes' are: one xdist worker runs both.
pytestmark = pytest.mark.xdist_group("agents_and_test_hosts")


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


def test_a_node_whose_launcher_died_under_running_ranks_is_a_warning_but_not_once_they_exited() -> None:
    from dataclasses import replace

    node0 = node_state(0, r1=sample(1, stack(None, 41, "load_batch")))
    streams = feed((node0, "node0"), (node_state(1), "node1"))
    streams.reports["node1"] = replace(streams.reports["node1"], launcher_running=False)
    state = merged(streams)
    assert [(f.id, f.ranks) for f in state.findings] == [("straggler", (0, 1, 2, 3)), ("launcher-gone", (2, 3))]
    assert state.findings[1].culprits == () and "node1: the job's launcher" in state.findings[1].message
    # the straggler's stack still changing (slow, maybe not stuck): a warning, still listed before the node's own
    moving = states(job(4, 2, 0), *[all_in(2, "all_reduce", r1=sample(1, stack(None, 41 + i, "f"))) for i in range(4)])
    streams = feed((moving, "node0"), (node_state(1), "node1"))
    streams.reports["node1"] = replace(streams.reports["node1"], launcher_running=False)
    found = merged(streams).findings
    assert [(f.id, f.severity) for f in found] == [("straggler", "warning"), ("launcher-gone", "warning")], found
    assert merged(streams).verdict.message.startswith("! straggler, launcher-gone")
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
