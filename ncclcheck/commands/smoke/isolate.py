"""``ncclcheck smoke --isolate``: run the isolation plan's stages across the nodes, node 0 deciding each next one.

Every node runs the same command (as a multi-node smoke does). Node 0 hosts a store on --master-addr:
--master-port; each node posts its host name and address; node 0 posts each stage (groups, their masters and
ports), every member runs its part as a whole ``ncclcheck smoke`` and posts the outcome; node 0 judges it and
posts the next stage or the verdict. ^C, SIGTERM or SIGHUP end this node's stage (its torchrun and ranks).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from rich.console import Console

from ncclcheck import exits
from ncclcheck.analysis.smoke.isolate import judge, next_step
from ncclcheck.analysis.smoke.progress import INIT_GRACE_S
from ncclcheck.collectors import isolate as meet
from ncclcheck.collectors import launch as launcher
from ncclcheck.model.isolate import HEALTHY, GroupRun, IsolateVerdict, Stage, StageResult, verdict_from_json
from ncclcheck.model.smoke import Launch
from ncclcheck.report_files import replace_json
from ncclcheck.signals import Ended, handling
from ncclcheck.views.isolate import group_text, render_verdict, stage_line, to_json

OPS = "all_reduce,all_gather,send_recv"  # a short pass over the patterns a network carries
STAGE_MARGIN_S = 150.0  # past a member's own watchdog: its hang exchange, its dumps, torchrun's exit
PORTS = 2000  # the stages' jobs use --master-port+1 .. +PORTS
# Ops whose busbw says nothing of the network on a backend: gloo's send_recv (both ranks send and receive at once
# on one TCP connection) runs at either of two speeds per pair of hosts, 0.3 or 4-5 ms per 256K on the test hosts'
# veths (one jiffy at HZ=250: TCP's delayed ACK), whichever pair it is: 10x between healthy pairs. Still run and
# verified (a group where it fails or hangs fails); only its busbw is not judged.
UNTIMED_BY_BACKEND = {"gloo": frozenset({"send_recv"})}
PEER_POLL_S = 1.0  # how often a member looks whether a peer of its group failed
EARLY_END_S = 60.0  # a member's smoke ended early writes its report and ends its ranks within this, else killed


def run(args: argparse.Namespace, launch: Launch, console: Console) -> int:
    own_addr = launcher.route_interface(launch.master_addr)[0] if launch.master_addr else "127.0.0.1"
    try:
        store = meet.open_store(launch.master_addr or "127.0.0.1", launch.master_port or 29400, launch.node_rank == 0)
    except Exception as exc:
        console.print(f"ncclcheck smoke --isolate: cannot reach node 0's store: {exc}", style="red", highlight=False)
        return exits.LAUNCH_FAILED
    meet.post(store, f"node/{launch.node_rank}", {"host": socket.gethostname(), "addr": own_addr or ""})
    with handling():
        try:
            return _stages(store, args, launch, console)
        except (Ended, KeyboardInterrupt) as stop:
            signum = stop.signum if isinstance(stop, Ended) else signal.SIGINT
            print(f"ncclcheck smoke --isolate: ended by {signal.Signals(signum).name}", file=sys.stderr)
            return exits.by_signal(signum)


def _stages(store: Any, args: argparse.Namespace, launch: Launch, console: Console) -> int:
    wait_s = args.timeout + INIT_GRACE_S + STAGE_MARGIN_S
    nodes = {n: meet.wait(store, f"node/{n}", wait_s) or {} for n in range(launch.nodes)}
    hosts = {n: str(info.get("host", "?")) for n, info in nodes.items()}
    done: list[StageResult] = []
    for index in range(10_000):
        posted = _decide(store, index, done, args, launch, nodes) if launch.node_rank == 0 else None
        posted = posted or meet.wait(store, f"stage/{index}", 10 * wait_s)
        if posted is None:
            console.print("ncclcheck smoke --isolate: node 0 posted no next stage", style="red", highlight=False)
            return exits.PROBLEM
        if "verdict" in posted:
            return _concluded(posted["verdict"], hosts, done, args, launch, console)
        _member(store, index, posted, args, launch, console)
        if launch.node_rank == 0:
            done.append(_gather(store, index, posted, wait_s))
            judged = judge(done, args.busbw_floor)
            console.print(stage_line(index, done[-1], judged[-1]), highlight=False)
            _write(args, hosts, done, None, "running")
    return exits.PROBLEM


def _decide(
    store: Any, index: int, done: list[StageResult], args: argparse.Namespace, launch: Launch, nodes: dict[int, Any]
) -> dict[str, Any]:
    step = next_step(launch.nodes, done, args.busbw_floor)
    if isinstance(step, IsolateVerdict):
        posted: dict[str, Any] = {"verdict": {**step.to_json(), "runs": len(done)}}
    else:
        base = launch.master_port or 29400
        posted = {
            "kind": step.kind,
            "groups": [list(g) for g in step.groups],
            "masters": [nodes[g[0]].get("addr", "") for g in step.groups],
            "ports": [base + 1 + (index * launch.nodes + i) % PORTS for i in range(len(step.groups))],
        }
    meet.post(store, f"stage/{index}", posted)
    return posted


def _member(
    store: Any, index: int, posted: dict[str, Any], args: argparse.Namespace, launch: Launch, console: Console
) -> None:
    """This node's part of the stage, if it has one: a whole smoke run; the outcome goes on the store."""
    where = [(i, g) for i, g in enumerate(posted["groups"]) if launch.node_rank in g]
    if not where:
        return
    i, group = where[0]
    stage_dir = os.path.join(launch.log_dir, f"stage{index}-{posted['kind']}")
    report_path = os.path.join(stage_dir, "smoke.json")
    argv = _member_argv(args, launch, group, posted["masters"][i], posted["ports"][i], stage_dir, report_path)
    proc = meet.start_member(argv, os.path.join(stage_dir, "smoke.out"))
    try:
        code, first = _until_done(store, index, proc, [n for n in group if n != launch.node_rank])
    except BaseException:
        launcher.end_tree(proc, [])  # ^C or any error: the stage's torchrun and ranks end with us
        raise
    outcome = _outcome(code, meet.read_report(report_path))
    if first is not None:
        outcome["reason"] = f"ended early: node {first} of its group failed first"
        outcome["ended_by"] = first
    meet.post(store, f"result/{index}/{launch.node_rank}", outcome)
    if launch.node_rank != 0:
        state = "pass" if code == 0 else f"fail ({outcome['reason']})"
        console.print(f"stage {index} {posted['kind']}: this node in {group_text(tuple(group))}: {state}")


def _until_done(store: Any, index: int, proc: subprocess.Popen[bytes], peers: list[int]) -> tuple[int, int | None]:
    """The member's exit code, and the peer whose failure ended it early (None: it ended by itself). A group fails
    when any member fails: once a peer posts its failure, this member's smoke is ended (SIGTERM: it ends its
    torchrun and ranks and writes its report) instead of waiting out its own deadline for a group already failed."""
    while True:
        try:
            return proc.wait(timeout=PEER_POLL_S), None
        except subprocess.TimeoutExpired:
            pass
        posted = {n: o for n in peers if (o := meet.posted(store, f"result/{index}/{n}")) and o.get("code") != 0}
        failed = sorted(posted, key=lambda n: bool(posted[n].get("after_peer")))  # a member its peer took down: later
        if failed:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout=EARLY_END_S), failed[0]
            except subprocess.TimeoutExpired:
                launcher.end_tree(proc, [])
                return proc.wait(), failed[0]


def _member_argv(
    args: argparse.Namespace, launch: Launch, group: list[int], master: str, port: int, stage_dir: str, report: str
) -> list[str]:
    argv = ["--backend", launch.backend, "--nproc", str(launch.nproc), "--ops", args.isolate_ops]
    argv += ["--sizes", args.sizes, "--iters", str(args.iters), "--warmup", str(args.warmup)]
    argv += ["--timeout", str(args.timeout), "--log-dir", stage_dir, "--json", report]
    if len(group) > 1:
        argv += ["--nodes", str(len(group)), "--node-rank", str(group.index(launch.node_rank))]
        argv += ["--master-addr", master, "--master-port", str(port)]
    else:
        argv += ["--nodes", "1", "--node-rank", "0"]
    return argv


def _outcome(code: int, report: dict[str, Any] | None) -> dict[str, Any]:
    if report is None:
        return {"code": code, "busbw": {}, "reason": f"smoke exited {code} without a report"}
    largest: dict[str, tuple[int, float]] = {}
    unjudged = UNTIMED_BY_BACKEND.get(str(report.get("backend")), frozenset())
    for row in report.get("results", []):
        if row["op"] in unjudged:
            continue
        if row.get("busbw_gbps") is not None and row["bytes"] >= largest.get(row["op"], (-1, 0.0))[0]:
            largest[row["op"]] = (row["bytes"], _fastest_busbw(row))
    problems = [f["message"] for f in report.get("findings", []) if f.get("severity") == "error"]
    reason = "" if code == 0 else (problems[0] if problems else f"smoke exited {code}")
    busbw = {op: bw for op, (_, bw) in largest.items()} if report.get("scope") == "job" else {}
    after_peer = any(said in reason for said in PEER_GONE)
    return {"code": code, "busbw": busbw, "reason": _shortened(reason), "after_peer": after_peer}


# What a rank's own backend says when the peer at the other end went away: the failure is that peer's, not its own.
# gloo's transport (tcp/pair.cc: "Connection closed by peer [ADDR]:PORT"; a read's ECONNRESET), NCCL's socket
# transport ("Connection closed by remote peer") and its ncclRemoteError ("remote process exited or there was a
# network error").
PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Connection closed by remote peer",
    "remote process exited",
)


def _later(outcome: dict[str, Any] | None) -> tuple[bool, bool]:
    """How a member's failure is ordered in its group's reason: by itself first, then one whose peer went away (its
    backend says so), then one ended early because another member failed."""
    if outcome is None:
        return False, False
    return "ended_by" in outcome, bool(outcome.get("after_peer"))


def _fastest_busbw(row: dict[str, Any]) -> float:
    """An op's busbw at its fastest iteration: a degraded link slows every iteration, a busy node only some (a
    report from before ``time_us_min``: at the median)."""
    busbw, p50, best = float(row["busbw_gbps"]), row.get("time_us_p50"), row.get("time_us_min")
    return busbw * float(p50) / float(best) if p50 and best else busbw


def _shortened(reason: str, head: int = 80, tail: int = 220) -> str:
    """A long reason's head (what failed) and tail (a rank's last output ends with its error): the middle goes."""
    return reason if len(reason) <= head + tail else f"{reason[:head]} … {reason[-tail:]}"


def _gather(store: Any, index: int, posted: dict[str, Any], wait_s: float) -> StageResult:
    runs = []
    for group in posted["groups"]:
        outcomes = {n: meet.wait(store, f"result/{index}/{n}", wait_s) for n in group}
        failed = [
            f"node {n}: {o['reason'] if o else 'posted no result'}"
            for n, o in sorted(outcomes.items(), key=lambda no: _later(no[1]))
            if not o or o["code"] != 0
        ]  # the members that failed by themselves first, then those their peer took down, then those ended early
        first = outcomes[group[0]] or {}
        busbw = tuple(sorted((op, float(bw)) for op, bw in first.get("busbw", {}).items()))
        runs.append(GroupRun(tuple(group), not failed, busbw if len(group) > 1 else (), "; ".join(failed)))
    return StageResult(Stage(posted["kind"], tuple(tuple(g) for g in posted["groups"])), tuple(runs))


def _concluded(
    posted: dict[str, Any],
    hosts: dict[int, str],
    done: list[StageResult],
    args: argparse.Namespace,
    launch: Launch,
    console: Console,
) -> int:
    verdict = verdict_from_json(posted)
    render_verdict(verdict, hosts, int(posted.get("runs", len(done))), console)
    if launch.node_rank == 0:
        _write(args, hosts, done, verdict, "concluded")
    return exits.OK if verdict.kind == HEALTHY else exits.PROBLEM


def _write(
    args: argparse.Namespace, hosts: dict[int, str], done: list[StageResult], verdict: IsolateVerdict | None, state: str
) -> None:
    if args.json:
        replace_json(args.json, to_json(hosts, done, judge(done, args.busbw_floor), verdict, state))
