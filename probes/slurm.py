"""The scheduler's grace under SLURM: KillWait, the seconds between SLURM's SIGTERM and its SIGKILL.

Run alone inside a SLURM job: ``python3 probes/slurm.py`` prints JSON (``null`` outside SLURM). Stdlib only.

``scontrol show config`` asks slurmctld; with a wrong SLURM_CONF or an unreachable controller it waits on DNS
and MessageTimeout for tens of seconds, so it is run bounded and a failure is a fact, never an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/slurm.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

SCONTROL_TIMEOUT_S = 3.0
SHOW_CONFIG = ("scontrol", "show", "config")
# "KillWait                = 30 sec" (scontrol show config, SLURM 22.05: tests/fixtures/slurm/).
KILL_WAIT = re.compile(r"^KillWait\s*=\s*(\d+)\s*sec\b", re.MULTILINE)


@dataclass(frozen=True)
class SlurmFacts:
    """The SLURM job this node runs in; ``kill_wait_s`` None when it could not be read (``source`` says why)."""

    job_id: str
    kill_wait_s: int | None
    source: str  # "scontrol show config", or why KillWait is not known here


def collect(
    env: Mapping[str, str],
    timeout_s: float = SCONTROL_TIMEOUT_S,
    run: Callable[..., subprocess.CompletedProcess[Any]] = subprocess.run,
) -> SlurmFacts | None:
    """KillWait from ``scontrol show config`` within ``timeout_s``; None when not in a SLURM job.

    ``run``: subprocess.run, or the tests' stand-in for a scontrol that is missing, fails or hangs.
    """
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        done = run(SHOW_CONFIG, capture_output=True, text=True, timeout=timeout_s, env=dict(env), check=False)
    except FileNotFoundError:
        return SlurmFacts(job_id, None, "scontrol not found on PATH")
    except subprocess.TimeoutExpired:
        return SlurmFacts(job_id, None, f"scontrol show config did not answer within {timeout_s:g} s")
    except OSError as exc:
        return SlurmFacts(job_id, None, f"scontrol could not run: {exc.strerror or exc}")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return SlurmFacts(job_id, None, f"scontrol show config failed: {said}")
    return from_config(job_id, done.stdout)


def from_config(job_id: str, text: str) -> SlurmFacts:
    """The facts from the text ``scontrol show config`` printed."""
    found = KILL_WAIT.search(text)
    if found is None:
        return SlurmFacts(job_id, None, "scontrol show config printed no KillWait")
    return SlurmFacts(job_id, int(found.group(1)), "scontrol show config")


def saved(env: Mapping[str, str]) -> SlurmFacts | None:
    """Under ``--root``: the saved environment's job, with KillWait unknown (scontrol asks this cluster, not it)."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    return SlurmFacts(job_id, None, "not asked: a saved tree (--root) holds no scontrol output")


def main() -> int:
    facts = collect(os.environ)
    if facts is None:
        print("null")  # not in a SLURM job
        return 0
    return _sysfs.print_json(facts)


if __name__ == "__main__":
    sys.exit(main())
