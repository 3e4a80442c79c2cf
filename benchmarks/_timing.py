"""Wall time of a fresh process, shared by the benchmarks."""

from __future__ import annotations

import subprocess
import time


def wall(argv: list[str], check: bool = False) -> float:
    """Seconds ``argv`` takes to run to completion, its output discarded."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=check)
    return time.perf_counter() - start
