"""Check this node for everything that makes NCCL or gloo fail or hang, with the fix.

Reads sysfs, /dev and /proc, the network interfaces, the NCCL_*/TORCH_*/GLOO_* variables and
NCCL's config files. torch is never imported into ncclcheck's own process: torch's files are read,
and (live, not with --root) a child Python runs `import torch.distributed`, most of env's time, so
that a torch that is installed but broken is caught. Exit code: 0 nothing fails, 1 a check fails, 2 usage error.

examples:
  ncclcheck env
  ncclcheck env --master-addr 10.0.0.1 --master-port 29500 --nproc 8 --nnodes 2 --json
"""

from __future__ import annotations

import argparse
import json
import os

from ncclcheck import exits
from ncclcheck.analysis.env import analyse
from ncclcheck.collectors.env import collect_snapshot, host_name, saved_host
from ncclcheck.exits import UsageError
from ncclcheck.model.env import EnvOptions
from ncclcheck.probes._sysfs import SavedTreeError, parse_int
from ncclcheck.views.console import make_console
from ncclcheck.views.env import render, to_json


def _positive(text: str) -> int:
    number = parse_int(text)
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the ncclcheck.env/1 JSON report")
    parser.add_argument(
        "--root",
        default="/",
        metavar="DIR",
        help="read sys/, dev/, proc/ and ifaddrs.json under DIR (a copied tree) instead of /",
    )
    parser.add_argument("--master-addr", metavar="A", help="rendezvous host to check (default: $MASTER_ADDR)")
    parser.add_argument("--master-port", metavar="P", help="rendezvous port to check (default: $MASTER_PORT)")
    parser.add_argument(
        "--nproc", type=_positive, metavar="N", help="ranks this node will run (default: $LOCAL_WORLD_SIZE)"
    )
    parser.add_argument(
        "--nnodes", type=_positive, metavar="N", help="nodes in the job (default: from launcher variables)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="assume",
        help="judge as if NAME were set to VALUE (over the environment, or over a saved tree's with --root)",
    )
    parser.add_argument(
        "--no-import",
        action="store_false",
        dest="try_import",
        help="leave out the child Python's `import torch.distributed` (most of env's time; torch's files are still"
        " read): a torch that is installed but does not import is then not caught",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show the details of every check")


def run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(
            f"ncclcheck env: --root {args.root} is not a directory (give a copied tree with sys/ and dev/)"
        )
    options = EnvOptions(
        root=os.path.abspath(args.root) if args.root != "/" else "/",
        master_addr=args.master_addr,
        master_port=args.master_port,
        nproc=args.nproc,
        nnodes=args.nnodes,
        try_import=args.try_import,
    )
    assumed = dict(a.split("=", 1) for a in args.assume if "=" in a)
    bad = [a for a in args.assume if "=" not in a or not a.split("=", 1)[0]]
    if bad:
        raise UsageError(f"ncclcheck env: --set {bad[0]}: give NAME=VALUE (see ncclcheck env --help)")
    try:
        snapshot = collect_snapshot(options, assumed=assumed)
    except SavedTreeError as exc:
        raise UsageError(f"ncclcheck env: {exc}") from None
    tree_host = saved_host(options.root) if options.root != "/" else None
    report = analyse(snapshot, tree_host or (host_name() if options.root == "/" else f"the tree {options.root}"))
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        render(report, make_console(), verbose=args.verbose)
    return exits.env(report.verdict)
