"""Wall time of a fresh process, shared by the benchmarks."""

from __future__ import annotations

import subprocess
import time

from ncclcheck.probes.host import find_py_spy


def wall(argv: list[str], check: bool = False, ok: tuple[int, ...] | None = None) -> float:
    """Seconds ``argv`` takes to run to completion; ``ok``: the exit codes that are not a failure.

    Output goes to a pipe, not /dev/null: GNU grep notices /dev/null and stops at the first match.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=check)
    if ok is not None and done.returncode not in ok:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')[:300]}")
    return time.perf_counter() - start


def by_hand(pids: list[int]) -> float:
    """What a user does today: py-spy dump of each rank, one after the other (stacks only: no cause, no culprit)."""
    binary = find_py_spy()
    assert binary, "py-spy is needed"
    begin = time.perf_counter()
    for pid in pids:
        subprocess.run([binary, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, check=False)
    return time.perf_counter() - begin
