"""Run every collective across ranks and nodes, verified and timed, with a watchdog that names the stuck rank.

Launches the ranks through torch's elastic launcher (torch.distributed.run). A rank that makes no
progress for --timeout seconds is dumped with py-spy and the job is ended: the report names the op,
the culprit rank(s) and what every rank was doing. Exit code: 0 pass, 1 fail or hang, 2 usage error,
3 could not launch.

examples:
  ncclcheck smoke --nproc 2 --backend gloo
  ncclcheck smoke --nodes 2 --node-rank 0 --master-addr 10.0.0.1 --drill hang@1:all_reduce
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any

from rich.console import Console

from ncclcheck.analysis.fingerprint import differences
from ncclcheck.analysis.smoke import (
    INIT_GRACE_S,
    diagnose,
    first_failure,
    job_results,
    local_results,
    merge,
    rank_died,
    stalled_ranks,
)
from ncclcheck.collectors import hang_exchange
from ncclcheck.collectors import launch as launcher
from ncclcheck.collectors.nccl_logs import nccl_transports
from ncclcheck.collectors.processes import process_state
from ncclcheck.collectors.progress import read_beats, read_progress
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.smoke import Hang, HangSample, OpResult, RankProgress
from ncclcheck.probes import gpu, versions
from ncclcheck.smoke.__main__ import DEFAULT_SIZES
from ncclcheck.smoke.plan import OPS, PlanError, parse_drill, parse_ops, parse_sizes
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke_report import SmokeSummary, hang_json, progress_line, render, write_json

POLL_S = 0.2
GATHER_S = 8.0
SEEN_S = 30.0  # py-spy's own timeout is 10 s a dump
AWAIT_GATHER_S = SEEN_S + 30.0  # node 0's own dumps, then its wait for the others
HANG_FIX = (
    "the culprit rank's stack shows where it is instead of the collective; if every rank is inside it,"
    " run `ncclcheck env` on each node and `ncclcheck logs` on the NCCL logs"
)
EXIT_LAUNCH = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, help="ranks on this node (default: one per GPU with nccl, 2 with gloo)")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto", help="default: nccl if GPUs")
    parser.add_argument("--nodes", type=int, help="nodes in the job (default: $SLURM_NNODES or 1)")
    parser.add_argument("--node-rank", type=int, help="this node's rank (default: $SLURM_NODEID or 0)")
    parser.add_argument("--master-addr", help="node 0's address (default: first host of $SLURM_JOB_NODELIST)")
    parser.add_argument("--master-port", type=int, default=29400, help="rendezvous port (default 29400)")
    parser.add_argument("--ops", default=",".join(OPS), help="comma list of ops (default: all)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="MIN:MAX (x4 steps) or a list, e.g. 8:64M")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per op and size")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds without progress before a rank is stuck")
    parser.add_argument(
        "--drill",
        action="append",
        default=[],
        metavar="KIND@RANK:OP",
        help="make a rank misbehave: hang@1:all_reduce, crash@0:broadcast, kill@1:all_reduce (SIGKILL), mismatch@1:all_gather",
    )
    parser.add_argument("--tui", action="store_true", help="show the ranks live in the watch app while it runs")
    parser.add_argument("--json", metavar="FILE", help="write the ncclcheck.smoke/1 report to FILE as it runs")
    parser.add_argument("--log-dir", metavar="DIR", help="keep rank logs, NCCL logs and dumps here")


class Usage(Exception):
    pass


def _settings(args: argparse.Namespace) -> launcher.Launch:
    try:
        ops, sizes = parse_ops(args.ops), parse_sizes(args.sizes)
        drills = [parse_drill(d) for d in args.drill]
    except PlanError as exc:
        raise Usage(str(exc)) from exc
    nodes = args.nodes or int(os.environ.get("SLURM_NNODES", "1") or 1)
    node_rank = args.node_rank if args.node_rank is not None else int(os.environ.get("SLURM_NODEID", "0") or 0)
    master = args.master_addr or _slurm_master()
    if nodes > 1 and not master:
        raise Usage("--nodes > 1 needs --master-addr (node 0's address)")
    if not 0 <= node_rank < nodes:
        raise Usage(f"--node-rank {node_rank} is not in 0..{nodes - 1}")
    if args.iters < 1 or args.warmup < 0 or args.timeout <= 0:
        raise Usage("--iters must be >= 1, --warmup >= 0 and --timeout > 0")
    backend, nproc = _backend(args)
    log_dir = args.log_dir or os.path.join("ncclcheck-logs", time.strftime("smoke-%Y%m%d-%H%M%S") + f"-node{node_rank}")
    worker = (
        "--ops",
        ",".join(ops),
        "--sizes",
        ",".join(map(str, sizes)),
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
        "--backend",
        backend,
        *[f"--drill={d.kind}@{d.rank}:{d.op}" for d in drills],
    )
    return launcher.Launch(nproc, nodes, node_rank, master, args.master_port, backend, os.path.abspath(log_dir), worker)


def _slurm_master() -> str | None:
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    first = nodelist.split(",")[0]
    if "[" in first:
        prefix, rest = first.split("[", 1)
        first = prefix + rest.split("-")[0].split(",")[0].rstrip("]")
    return first or None


def _backend(args: argparse.Namespace) -> tuple[str, int]:
    gpus = len(gpu.collect().gpus)
    backend = args.backend
    if backend == "auto":
        torch = versions.collect().torch
        backend = "nccl" if gpus and torch is not None and torch.nccl_built else "gloo"
    if backend == "nccl" and gpus == 0:
        raise Usage("--backend nccl needs a GPU on this node; use --backend gloo")
    nproc = args.nproc or (gpus if backend == "nccl" else 2)
    if nproc < 1:
        raise Usage("--nproc must be >= 1")
    return backend, nproc


def run(args: argparse.Namespace) -> int:
    console = make_console()
    try:
        settings = _settings(args)
    except Usage as exc:
        print(f"ncclcheck smoke: {exc} (see ncclcheck smoke --help)", file=sys.stderr)
        return 2
    world = settings.nproc * settings.nodes
    console.print(
        f"ncclcheck smoke: {world} rank(s) on {settings.nodes} node(s), {settings.backend}, logs in {settings.log_dir}",
        highlight=False,
    )
    unresolved = _unresolvable(settings)
    if unresolved:
        summary = _summary(settings, (), (), None, (unresolved,), False)
        render(summary, console)
        if args.json:
            write_json(summary, args.json)
        return EXIT_LAUNCH
    bad_output = _unwritable(args.json)
    if bad_output:
        print(f"ncclcheck smoke: --json {args.json}: {bad_output} (give a file in a directory that exists)",
              file=sys.stderr)  # fmt: skip
        return 2
    previous = {sig: signal.signal(sig, _ended) for sig in (signal.SIGTERM, signal.SIGHUP)}
    proc = launcher.start(settings)
    try:
        if args.tui and sys.stdout.isatty():
            summary = _with_tui(proc, settings, args, world)
        else:
            if args.tui:
                console.print("ncclcheck smoke: --tui needs a terminal; printing progress instead", highlight=False)
            summary = _watch(proc, settings, args, console)
    except Ended as ended:
        launcher.end_tree(proc, [])  # SIGTERM or SIGHUP (timeout, kill, a CI cancel): the job ends with us
        print(f"ncclcheck smoke: ended by {signal.Signals(ended.signum).name}; torchrun and every rank ended",
              file=sys.stderr)  # fmt: skip
        return 128 + ended.signum
    except BaseException:
        launcher.end_tree(proc, [])  # ^C or any error after launch: never leave a job running
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    render(summary, console)
    if any(f.id == "launch-failed" for f in summary.findings):
        return EXIT_LAUNCH
    return 0 if summary.verdict == "pass" else 1


class Ended(Exception):
    """SIGTERM or SIGHUP reached ncclcheck smoke."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _ended(signum: int, frame: FrameType | None) -> None:
    raise Ended(signum)


def _unwritable(path: str | None) -> str | None:
    """Why ``--json PATH`` cannot be written, checked before anything is launched; None when it can."""
    if path is None:
        return None
    if os.path.isdir(path):
        return "is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"no directory {parent}"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable"
    return None


def _with_tui(
    proc: subprocess.Popen[bytes], settings: launcher.Launch, args: argparse.Namespace, world: int
) -> SmokeSummary:
    """Run the smoke test's own watchdog in a thread while the watch app shows its ranks; close the app when done."""
    from ncclcheck.collectors.watch_source import LauncherSource
    from ncclcheck.tui.app import WatchApp

    source = LauncherSource(proc.pid, settings.nproc, args.timeout)
    app = WatchApp(source, 1.0)
    done: list[SmokeSummary] = []
    closed = threading.Event()

    def smoke() -> None:
        done.append(_watch(proc, settings, args, make_console(io.StringIO())))
        while not closed.is_set():
            if app.is_running:
                app.call_from_thread(app.exit)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=smoke, daemon=True)
    thread.start()
    app.run()
    closed.set()
    thread.join()  # the user may quit the app first: the smoke test still runs to its end
    return done[0]


def _unresolvable(settings: launcher.Launch) -> Finding | None:
    """A --master-addr that does not resolve fails at once, instead of after torchrun's rendezvous timeout."""
    if settings.nodes == 1 or not settings.master_addr:
        return None
    try:
        socket.getaddrinfo(settings.master_addr, settings.master_port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return Finding(
            "launch-failed",
            "error",
            f"the rendezvous address {settings.master_addr}:{settings.master_port} does not resolve ({exc})",
            "give node 0's IP or a name every node resolves (/etc/hosts or DNS); check it with"
            f" `ncclcheck env --master-addr {settings.master_addr} --master-port {settings.master_port}`",
        )
    return None


def _watch(
    proc: subprocess.Popen[bytes], settings: launcher.Launch, args: argparse.Namespace, console: Console
) -> SmokeSummary:
    launched, shown = time.time(), 0
    hang: Hang | None = None
    never_started = False
    while True:
        code = proc.poll()
        ranks = read_progress(settings.log_dir)
        results = _results(ranks, settings)
        for result in results[shown:]:
            console.print(progress_line(result))
        shown = len(results)
        if args.json:
            write_json(_summary(settings, ranks, results, None, (), False), args.json)
        if code is not None:
            break
        late = stalled_ranks(ranks, read_beats(settings.log_dir), time.time(), args.timeout)
        silent = len(ranks) < settings.nproc and time.time() - launched > args.timeout + INIT_GRACE_S
        if silent and not ranks:
            # No rank ever started: torchrun is still waiting for the rendezvous. A launch failure, not a hang.
            launcher.end_tree(proc, [])
            never_started = True
            break
        if late or silent:
            link = _announce(settings)
            hang = _exchange(_take_dumps(ranks, settings, console), link, settings, console)
            launcher.end_tree(proc, [r.pid for r in ranks if r.pid])
            break
        time.sleep(POLL_S)
    ranks = read_progress(settings.log_dir)
    errors = () if hang else _errors(None if never_started else proc.returncode, ranks, settings)
    results = _results(ranks, settings) + _failed_rows(ranks, hang, errors)
    finished = hang is None and not never_started and proc.returncode == 0
    summary = _summary(settings, ranks, results, hang, errors, finished)
    if args.json:
        write_json(summary, args.json)
    return summary


def _results(ranks: tuple[RankProgress, ...], settings: launcher.Launch) -> tuple[OpResult, ...]:
    """Node 0 shows the job-wide results rank 0 gathered; other nodes their own ranks' timings."""
    if settings.node_rank == 0:
        return job_results(ranks)
    return local_results(ranks, settings.nproc * settings.nodes)


def _summary(
    settings: launcher.Launch,
    ranks: tuple[RankProgress, ...],
    results: tuple[OpResult, ...],
    hang: Hang | None,
    errors: tuple[Finding, ...],
    finished: bool,
) -> SmokeSummary:
    zero = next((r for r in ranks if r.rank == 0), None)
    prints = (
        zero.job_fingerprints
        if zero and zero.job_fingerprints
        else tuple(r.fingerprint for r in ranks if r.fingerprint)
    )
    transports = nccl_transports(settings.log_dir) if settings.backend == "nccl" else ()
    findings = errors + differences(prints)
    if hang:
        findings += (Finding("smoke-hang", "error", hang.message, HANG_FIX, hang.culprits),)
    return SmokeSummary(
        settings.nproc * settings.nodes, settings.nodes, settings.node_rank, settings.backend, results, hang,
        findings, prints, transports, settings.log_dir, finished,
    )  # fmt: skip


def _announce(settings: launcher.Launch) -> tuple[Any | None, str | None]:
    """Several nodes, before the dumps: nodes > 0 say on the rendezvous store that they saw the hang;
    node 0 connects to it while its torchrun (which serves it) surely still runs."""
    if settings.nodes == 1 or not settings.master_addr:
        return None, None
    if settings.node_rank == 0:
        return hang_exchange.connect(settings.master_addr, settings.master_port), None
    return hang_exchange.announce(settings.master_addr, settings.master_port, settings.node_rank)


def _exchange(hang: Hang, link: tuple[Any | None, str | None], settings: launcher.Launch, console: Console) -> Hang:
    """Several nodes: post ours to the rendezvous store (nodes > 0) or gather the others' (node 0)."""
    if settings.nodes == 1 or not settings.master_addr:
        return hang
    if settings.node_rank > 0:
        store, why = link
        if store is not None:
            why = hang_exchange.post(
                store, settings.master_addr, settings.master_port, settings.node_rank, hang_json(hang)
            )
        if why or store is None:
            console.print(f"watchdog: {why}; node 0's report lacks this node's ranks", style="yellow")
        elif not hang_exchange.await_gathered(store, AWAIT_GATHER_S):
            console.print("watchdog: node 0 did not confirm it gathered this node's diagnosis", style="yellow")
        return hang
    store = link[0]
    posted = hang_exchange.gather(store, settings.nodes, GATHER_S, SEEN_S) if store is not None else {}
    silent = [node for node in range(1, settings.nodes) if node not in posted]
    if store is None:
        console.print(
            f"watchdog: the rendezvous store {settings.master_addr}:{settings.master_port} could not be reached;"
            " the other nodes' diagnoses are in their own reports",
            style="yellow",
        )
    elif silent:
        console.print(
            f"watchdog: node(s) {', '.join(map(str, silent))} posted no diagnosis"
            f" (waited {GATHER_S:.0f} s, {SEEN_S:.0f} s for a node that saw the hang); see their own reports",
            style="yellow",
        )
    remote = [h for h in map(hang_exchange.hang_from_json, posted.values()) if h is not None]
    return merge(hang, remote, settings.nproc * settings.nodes)


def _take_dumps(ranks: tuple[RankProgress, ...], settings: launcher.Launch, console: Console) -> Hang:
    console.print("watchdog: no progress past the deadline; taking py-spy dumps of the local ranks", style="yellow")
    pids = [r.pid for r in ranks if r.pid]
    dumps = dump_all(pids)
    samples = {
        r.rank: HangSample(r.rank, r.pid, process_state(r.pid), *dumps.get(r.pid or -1, ((), "no pid"))) for r in ranks
    }
    hang = diagnose(ranks, samples, settings.nproc * settings.nodes)
    with open(os.path.join(settings.log_dir, "hang-dumps.txt"), "w", encoding="utf-8") as handle:
        for state in hang.ranks:
            handle.write(f"rank {state.rank} ({state.state}):\n" + "".join(f"  {line}\n" for line in state.stack))
    return hang


def _errors(code: int | None, ranks: tuple[RankProgress, ...], settings: launcher.Launch) -> tuple[Finding, ...]:
    if code == 0:
        return ()
    failures = launcher.failures(settings.log_dir)
    if not ranks:
        endpoint = f"{settings.master_addr or '127.0.0.1'}:{settings.master_port}"
        return (
            Finding(
                "launch-failed",
                "error",
                f"the ranks never started ({'no rendezvous before the deadline' if code is None else f'torchrun exit code {code}'});"
                f" is the rendezvous {endpoint} reachable and node 0 started?"
                f" torchrun's output: {settings.log_dir}/torchrun.log",
                f"run `ncclcheck env --master-addr {settings.master_addr or '127.0.0.1'}"
                f" --master-port {settings.master_port}` on this node",
            ),
        )
    rank = first_failure(ranks, failures)
    where = next((r for r in ranks if r.rank == rank), None)
    local = where.local_rank if where else (rank or 0) % settings.nproc
    output = "" if where and where.error else launcher.last_output(settings.log_dir, local)
    death = next((f for f in failures if f.rank == rank), None)
    return (rank_died(rank, death, where, output, launcher.stderr_path(settings.log_dir, local)),)


def _failed_rows(
    ranks: tuple[RankProgress, ...], hang: Hang | None, errors: tuple[Finding, ...]
) -> tuple[OpResult, ...]:
    if hang:
        return (OpResult(hang.op, hang.bytes, 0, "hang", None, None, None, None, 0),)
    if errors and ranks:
        step = next((r for r in ranks if not r.ended and r.last_op), None)
        if step and step.last_op:
            return (OpResult(step.last_op, step.last_bytes, 0, "error", None, None, None, None, 0),)
    return ()


def worker_report(log_dir: str, backend: str) -> int:
    """Rank 0's report when the ranks ran under the user's own torchrun (no ncclcheck watchdog there)."""
    ranks = read_progress(log_dir)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    settings = launcher.Launch(local, max(world // local, 1), 0, None, 0, backend, log_dir, ())
    summary = _summary(settings, ranks, job_results(ranks), None, (), all(r.ended for r in ranks))
    render(summary, make_console())
    write_json(summary, os.path.join(log_dir, "report.json"))
    return 0 if summary.verdict == "pass" else 1
