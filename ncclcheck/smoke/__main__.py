"""``python -m ncclcheck.smoke``: as a torchrun worker (RANK set) run one rank; otherwise ``ncclcheck smoke``."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings

from ncclcheck import exits
from ncclcheck.analysis.smoke.plan import (
    DEFAULT_ITERS,
    DEFAULT_SIZES,
    DEFAULT_WARMUP,
    OPS,
    PlanError,
    parse_drill,
    parse_ops,
    parse_sizes,
)


def rank_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ncclcheck.smoke", description=__doc__)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    parser.add_argument("--iters", type=int, default=DEFAULT_ITERS)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--drill", action="append", default=[])
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    parser.add_argument("--log-dir", default=os.environ.get("NCCLCHECK_LOG_DIR", f"ncclcheck-logs/worker-{run_id}"))
    return parser


def main(argv: list[str] | None = None) -> int:
    if "RANK" not in os.environ:
        from ncclcheck.cli import main as cli_main

        return cli_main(["smoke", *(sys.argv[1:] if argv is None else argv)])
    # A torch without numpy warns on import; it would be the last line of a killed rank's output.
    warnings.filterwarnings("ignore", "Failed to initialize NumPy", UserWarning)
    from ncclcheck.smoke.worker import RankPlan, run_rank

    args = rank_parser().parse_args(argv)
    try:
        plan = RankPlan(
            parse_ops(args.ops),
            parse_sizes(args.sizes),
            args.iters,
            args.warmup,
            args.backend,
            tuple(parse_drill(d) for d in args.drill),
            args.log_dir,
        )
    except PlanError as exc:
        print(f"ncclcheck.smoke: {exc}", file=sys.stderr)
        return exits.USAGE
    try:
        code = run_rank(plan)
    except Exception:
        # Exit as the error, not as its teardown: with a peer still inside a collective, the live
        # process group's C++ destructors can abort the interpreter's exit ("terminate called
        # without an active exception", SIGABRT) and hide the exit code and the message's meaning.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if os.environ.get("RANK") == "0" and "NCCLCHECK_LOG_DIR" not in os.environ:
        # Under the user's own torchrun there is no ncclcheck launcher to report: rank 0 does.
        from ncclcheck.commands.smoke.rank_report import rank_report

        return rank_report(plan.log_dir, plan.backend) or code
    return code


if __name__ == "__main__":
    sys.exit(main())
