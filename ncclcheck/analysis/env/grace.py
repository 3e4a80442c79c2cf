"""The graces after a stop signal, for ``env.timeouts``: torchrun's (SIGTERM to its workers, SIGKILL after it) and
SLURM's KillWait (SIGTERM to every process of the job, SIGKILL after it).

Read in the sources (tests/unit/analysis/env/test_env_grace.py names the lines):
- torchrun's grace is ``LaunchConfig.shutdown_timeout``: ``--shutdown-timeout`` (or PET_SHUTDOWN_TIMEOUT), else
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s; torch reads the variable from 2.12 on, before that the 30 s is fixed;
- it is used when torchrun itself is signalled (scancel, a time limit); when a worker fails torchrun ends the others
  with ``_stop_workers`` -> ``_shutdown()``, whose 30 s default wins over the setting (torch 2.12 to 2.15);
- so it never cuts the Flight Recorder dumps after a timeout: the rank whose watchdog fired waits 4 x the dump wait
  before it raises, and the others dump (two tries, each bounded by the dump wait) before torchrun sees it fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ncclcheck.analysis.env.verdict import Issue, fail, warn
from ncclcheck.probes._sysfs import parse_int
from ncclcheck.probes.slurm import SlurmFacts

TORCHRUN_GRACE_S = 30
GRACE_SINCE = (2, 12)  # the first torch whose torchrun reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT / --shutdown-timeout
FLAG_VAR = "PET_SHUTDOWN_TIMEOUT"  # torchrun's --shutdown-timeout, read from the environment (argparse_util.env)
GRACE_VAR = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
SIGNAL_VARS = ("SBATCH_SIGNAL", "SLURM_SIGNAL")  # sbatch's and srun's --signal, when set as input variables
TORCHRUN_MARKS = ("TORCHELASTIC_RUN_ID", "PET_NPROC_PER_NODE", "PET_NNODES", FLAG_VAR, GRACE_VAR)


@dataclass(frozen=True)
class Grace:
    """torchrun's grace when it is signalled, where it came from, and what is wrong with its setting."""

    seconds: int
    source: str
    set_by_user: bool
    problems: tuple[Issue, ...]
    starts: bool = True  # False: torchrun stops over the setting before it starts a rank


def read_grace(env: Mapping[str, str], torch_release: tuple[int, int] | None) -> Grace:
    """The grace torchrun would use, as torch's code reads it (``int()``, the flag's variable first)."""
    name = FLAG_VAR if env.get(FLAG_VAR) else GRACE_VAR if env.get(GRACE_VAR) else None
    if name is None:
        return Grace(TORCHRUN_GRACE_S, f"default {TORCHRUN_GRACE_S}", False, ())
    setting = f"{name}={env[name]}"
    if torch_release is not None and torch_release < GRACE_SINCE:
        text = f"{setting} is set, but torch {torch_release[0]}.{torch_release[1]}'s torchrun does not read it"
        fix = f"torch {GRACE_SINCE[0]}.{GRACE_SINCE[1]} or newer reads it; until then the grace is {TORCHRUN_GRACE_S} s"
        return Grace(TORCHRUN_GRACE_S, f"fixed {TORCHRUN_GRACE_S} in this torch", True, (warn(text, fix),))
    value = parse_int(env[name])
    if value is None:
        why = "argparse: invalid int value" if name == FLAG_VAR else "ValueError: invalid literal for int()"
        return Grace(TORCHRUN_GRACE_S, setting, True, (_stops_at_start(setting, why, torch_release),), False)
    if value < 0 and name == FLAG_VAR:
        why = "ValueError: shutdown_timeout must be non-negative"
        return Grace(TORCHRUN_GRACE_S, setting, True, (_stops_at_start(setting, why, torch_release),), False)
    if value < 0:  # LaunchConfig refuses a negative flag, not a negative variable: close() waits 0 s
        text = f"{setting} is negative: torchrun sends SIGKILL right after SIGTERM, no grace at all"
        return Grace(0, setting, True, (warn(text, f"unset {name} (30 s) or give the seconds a rank needs"),))
    return Grace(value, setting, True, ())


def _stops_at_start(setting: str, why: str, torch_release: tuple[int, int] | None) -> Issue:
    name = setting.split("=", 1)[0]
    text = f"{setting} is not a number of seconds torchrun takes: torchrun stops before it starts a rank ({why})"
    fix = f"write {name} as whole seconds, e.g. {name}=30"
    if torch_release is None:
        return warn(f"{text}, from torch {GRACE_SINCE[0]}.{GRACE_SINCE[1]} on (torch not seen here)", fix)
    return fail(text, fix)


def grace_details(grace: Grace, dump_wait_s: float, slurm: SlurmFacts | None, env: Mapping[str, str]) -> list[str]:
    lines = [
        f"torchrun's grace when it is signalled (SIGTERM to its ranks, SIGKILL after it): {grace.seconds} s"
        f" ({grace.source}); when a rank fails it ends the others with {TORCHRUN_GRACE_S} s whatever is set"
        " (torch up to 2.15)",
        f"the Flight Recorder dumps do not wait on it: the rank that timed out waits 4 x {dump_wait_s:g} s, while"
        " the others dump, before it exits and torchrun ends the rest",
    ]
    if slurm is None:
        return [*lines, "not in a SLURM job (no SLURM_JOB_ID): no scheduler grace to check"]
    if slurm.kill_wait_s is None:
        lines.append(f"SLURM job {slurm.job_id}: KillWait unknown ({slurm.source}), not checked against torchrun")
    else:
        lines.append(f"SLURM job {slurm.job_id}: KillWait {slurm.kill_wait_s} s ({slurm.source})")
    signal = next((f"{n}={env[n]}" for n in SIGNAL_VARS if env.get(n)), None)
    lines.append(
        f"the job's --signal: {signal} (sent that many seconds before the time limit; @60 when no time is given)"
        if signal
        else "the job's --signal is not visible here (no SBATCH_SIGNAL or SLURM_SIGNAL; sbatch exports none)"
    )
    return lines


def grace_issues(grace: Grace, slurm: SlurmFacts | None, env: Mapping[str, str]) -> list[Issue]:
    """The setting's own problems, and a SLURM KillWait that ends torchrun before its grace is over."""
    issues = list(grace.problems)
    kill_wait = slurm.kill_wait_s if slurm else None
    torchrun_here = grace.set_by_user or any(env.get(n) for n in TORCHRUN_MARKS)
    if kill_wait is None or kill_wait > grace.seconds or not torchrun_here or not grace.starts:
        return issues
    issues.append(
        warn(
            f"SLURM's KillWait ({kill_wait} s) is not longer than torchrun's grace ({grace.seconds} s,"
            f" {grace.source}): when SLURM ends the job (scancel, time limit) it SIGKILLs every process {kill_wait} s"
            " after its SIGTERM, so a rank still busy after the SIGTERM (a handler saving a checkpoint, a slow"
            " exit) is killed by SLURM first, and torchrun with it, before it has said which ranks it had to kill"
            " and printed its 'SignalException: ... got signal'",
            _kill_wait_fix(kill_wait, grace),
        )
    )
    return issues


def _kill_wait_fix(kill_wait: int, grace: Grace) -> str:
    admins = f"ask the cluster's admins for a KillWait (slurm.conf) longer than {grace.seconds} s"
    if kill_wait < 2 or grace.source.startswith("fixed"):
        return admins
    below = max(kill_wait - 10, kill_wait // 2)
    return f"keep torchrun's grace below KillWait: {GRACE_VAR}={below} (or torchrun --shutdown-timeout {below}), or {admins}"
