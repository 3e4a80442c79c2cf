"""``ncclcheck smoke``'s command line made into a Launch, or one line saying what is wrong (a usage error)."""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Mapping

from ncclcheck.analysis.smoke.plan import PlanError, check_drills, parse_drill, parse_ops, parse_sizes
from ncclcheck.model.smoke import Launch
from ncclcheck.probes import gpu, versions


class Usage(Exception):
    """A value the run cannot use; the message says which and why."""


def settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Launch:
    try:
        ops, sizes = parse_ops(args.ops), parse_sizes(args.sizes)
        drills = tuple(parse_drill(d) for d in args.drill)
    except PlanError as exc:
        raise Usage(str(exc)) from exc
    nodes = args.nodes if args.nodes is not None else _slurm_int(environ, "SLURM_NNODES", 1, "--nodes")
    node_rank = args.node_rank if args.node_rank is not None else _slurm_int(environ, "SLURM_NODEID", 0, "--node-rank")
    if nodes < 1:
        raise Usage(f"--nodes {nodes}: a job has at least one node")
    master = args.master_addr or slurm_master(environ.get("SLURM_JOB_NODELIST", ""))
    if nodes > 1 and not master:
        raise Usage("--nodes > 1 needs --master-addr (node 0's address)")
    if not 0 <= node_rank < nodes:
        raise Usage(f"--node-rank {node_rank} is not in 0..{nodes - 1}")
    if args.iters < 1 or args.warmup < 0:
        raise Usage("--iters must be >= 1 and --warmup >= 0")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Usage(f"--timeout {args.timeout}: give a number of seconds > 0 (the watchdog's deadline)")
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise Usage(f"--master-port {args.master_port} is not a port (1..65535)")
    backend, nproc = _backend(args)
    try:
        check_drills(drills, ops, nproc * nodes)
    except PlanError as exc:
        raise Usage(str(exc)) from exc
    port = args.master_port if args.master_port is not None or nodes == 1 else DEFAULT_MULTINODE_PORT
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
    log_dir = run_dir(args.log_dir, node_rank)
    return Launch(nproc, nodes, node_rank, master, port, backend, log_dir, worker)


DEFAULT_MULTINODE_PORT = 29400  # torchrun's own c10d default; one node lets torchrun pick a free port instead


def run_dir(asked: str | None, node_rank: int) -> str:
    """A directory of this run's own: never one a previous run wrote into (its files would read as ours).

    ``--log-dir DIR`` is used as it is when it is new or empty; otherwise this run gets a new
    sub-directory of it. Nothing is ever deleted.
    """
    if asked is not None and (not os.path.exists(asked) or (os.path.isdir(asked) and not os.listdir(asked))):
        return os.path.abspath(asked)
    if asked is not None and not os.path.isdir(asked):
        raise Usage(f"--log-dir {asked} is a file; give a directory")
    base = asked if asked is not None else "ncclcheck-logs"
    stem = os.path.join(base, time.strftime("smoke-%Y%m%d-%H%M%S") + f"-node{node_rank}")
    os.makedirs(base, exist_ok=True)
    path, n = stem, 1
    while True:  # made here, not only named: two runs started in the same second never share one
        try:
            os.mkdir(path)
            return os.path.abspath(path)
        except FileExistsError:
            n += 1
            path = f"{stem}-{n}"


def _slurm_int(environ: Mapping[str, str], name: str, default: int, flag: str) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise Usage(f"${name}={text!r} is not a whole number; give {flag}") from None


def slurm_master(nodelist: str) -> str | None:
    """The first host of a SLURM node list (``node[03-05,07],gpu1`` -> node03)."""
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
    nproc = args.nproc if args.nproc is not None else (gpus if backend == "nccl" else 2)
    if nproc < 1:
        raise Usage(f"--nproc {nproc}: run at least one rank")
    return backend, nproc
