"""Wall time of a fresh process, shared by the benchmarks."""

from __future__ import annotations

import subprocess
import time


def wall(argv: list[str], check: bool = False, ok: tuple[int, ...] | None = None) -> float:
    """Seconds ``argv`` takes to run to completion; ``ok``: the exit codes that are not a failure.

    Output goes to a pipe, not /dev/null: GNU grep notices /dev/null and stops at the first match.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=check)
    if ok is not None and done.returncode not in ok:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')[:300]}")
    return time.perf_counter() - start
