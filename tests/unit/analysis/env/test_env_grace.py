"""env.timeouts, the graces after a stop signal: torchrun's and SLURM's KillWait, over hand-built snapshots.

Where each value and rule comes from (read in the code, not guessed):
- torchrun's grace: ``LaunchConfig.__post_init__`` sets ``shutdown_timeout = int(os.environ.get(
  "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))`` when no ``--shutdown-timeout`` was given, and refuses only a negative
  flag (torch/distributed/launcher/api.py); the flag is ``action=env``, so PET_SHUTDOWN_TIMEOUT stands for it
  (torch/distributed/run.py, argparse_util.env). Checked on 2.13.0 here: PET_SHUTDOWN_TIMEOUT=45 beats
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7, "30s" raises ValueError, -5 gives -5. The release wheels' launcher/api.py read
  the variable in 2.12.0, 2.13.0, 2.14.0 and 2.15.0 and not in 2.11.0 (pytorch#172596): before 2.12 it is 30 s fixed.
- which path uses it: ``SimpleElasticAgent.run`` catches ``SignalException`` and calls ``self._shutdown(e.sigval,
  timeout=self._shutdown_timeout)`` (elastic/agent/server/api.py); a failed worker group goes through
  ``_stop_workers`` -> ``self._shutdown()``, whose default ``timeout: int = 30`` wins (local_elastic_agent.py, the
  same in the 2.12 to 2.15 wheels; pytorch#192815, open, would pass the setting). ``PContext._close`` sends the
  signal, waits ``timeout`` and then SIGKILLs (elastic/multiprocessing/api.py).
- the Flight Recorder dumps (pytorch/pytorch ProcessGroupNCCL.cpp): the rank whose watchdog fired calls
  ``broadcastDumpSignal()`` and then sleeps ``getDumpTimeout() * 4`` before ``handleException``; the other ranks'
  HeartbeatMonitor polls the store every TORCH_NCCL_COORD_CHECK_MILSEC (1000 ms), and dumps in at most two tries of
  ``waitTimeoutDumpInMilSec_`` each. So they have dumped before that rank exits and torchrun starts any grace: a
  grace shorter than the dump wait cuts nothing (and a rank without a SIGTERM handler ends at the SIGTERM anyway).
- SLURM: "When the time limit is reached, each task in each job step is sent SIGTERM followed by SIGKILL. The
  interval between signals is specified by the Slurm configuration parameter KillWait" (sbatch(1), 22.05); the
  default 30 s is in tests/fixtures/slurm/. --signal is exported to no output variable (sbatch(1) OUTPUT ENVIRONMENT
  VARIABLES) and ``scontrol show job`` did not print it on the test cluster; SBATCH_SIGNAL / SLURM_SIGNAL are
  sbatch's and srun's input variables for it.
"""

from __future__ import annotations

import dataclasses

import pytest
from snapshots import bare, check

from ncclcheck.model.checks import Check, Status
from ncclcheck.probes.slurm import SlurmFacts
from ncclcheck.probes.versions import Torch

KILL_WAIT_30 = SlurmFacts("4242", 30, "scontrol show config")


def timeouts(env: dict[str, str], slurm: SlurmFacts | None = None, torch: str | None = "2.13.0+cu128") -> Check:
    snapshot = bare({**env, **({"SLURM_JOB_ID": slurm.job_id} if slurm else {})}, slurm=slurm)
    if torch is not None:
        found = Torch(torch, "/usr/lib/python3/site-packages/torch", "12.8", None, True, True)
        snapshot = dataclasses.replace(snapshot, versions=dataclasses.replace(snapshot.versions, torch=found))
    return check(snapshot, "env.timeouts")


def text(result: Check) -> str:
    return "\n".join((result.summary, *result.details, result.fix))


# Must fire.


def test_a_grace_longer_than_kill_wait_is_cut_by_slurm_and_the_fix_names_a_grace_below_it() -> None:
    result = timeouts({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}, KILL_WAIT_30)
    assert result.status is Status.WARN, result
    assert "SLURM's KillWait (30 s) is not longer than torchrun's grace (120 s" in result.summary
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=20" in result.fix and "KillWait (slurm.conf)" in result.fix


def test_a_kill_wait_equal_to_torchrun_s_default_fires_inside_a_torchrun_job() -> None:
    """SLURM's SIGKILL comes KillWait after its SIGTERM; torchrun's deadline starts a moment after it got that
    SIGTERM, so at equal values SLURM's SIGKILL always lands first."""
    result = timeouts({"TORCHELASTIC_RUN_ID": "none"}, KILL_WAIT_30)
    assert result.status is Status.WARN and "torchrun's grace (30 s, default 30)" in result.summary, result


def test_torchrun_s_flag_variable_wins_over_the_grace_variable() -> None:
    env = {"PET_SHUTDOWN_TIMEOUT": "45", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "7"}
    result = timeouts(env, SlurmFacts("1", 40, "scontrol show config"))
    assert result.status is Status.WARN and "(45 s, PET_SHUTDOWN_TIMEOUT=45)" in result.summary, result
    swapped = {"PET_SHUTDOWN_TIMEOUT": "7", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "45"}
    assert timeouts(swapped, SlurmFacts("1", 40, "scontrol show config")).status is Status.OK


@pytest.mark.parametrize(
    ("env", "torch", "status", "words"),
    [
        ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "30s"}, "2.13.0", Status.FAIL, "ValueError: invalid literal for int()"),
        ({"PET_SHUTDOWN_TIMEOUT": "lots"}, "2.12.0", Status.FAIL, "argparse: invalid int value"),
        ({"PET_SHUTDOWN_TIMEOUT": "-5"}, "2.15.1", Status.FAIL, "shutdown_timeout must be non-negative"),
        ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "30s"}, None, Status.WARN, "from torch 2.12 on (torch not seen here)"),
        ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "-5"}, "2.13.0", Status.WARN, "SIGKILL right after SIGTERM"),
        ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "300"}, "2.11.0", Status.WARN, "torch 2.11's torchrun does not read it"),
    ],
)
def test_a_grace_setting_torchrun_cannot_take_is_said_as_torchrun_takes_it(
    env: dict[str, str], torch: str | None, status: Status, words: str
) -> None:
    result = timeouts(env, torch=torch)
    assert result.status is status and words in result.summary, result
    assert result.fix


# Must not fire.


def test_defaults_outside_slurm_say_every_grace_and_find_nothing() -> None:
    result = timeouts({})
    assert result.status is Status.OK, result
    assert "when it is signalled (SIGTERM to its ranks, SIGKILL after it): 30 s (default 30)" in text(result)
    assert "not in a SLURM job (no SLURM_JOB_ID)" in text(result)


def test_slurm_defaults_without_a_sign_of_torchrun_are_said_not_judged() -> None:
    """srun may start the ranks itself: with nothing saying torchrun runs here, its grace is not held against
    KillWait."""
    result = timeouts({}, KILL_WAIT_30)
    assert result.status is Status.OK and "SLURM job 4242: KillWait 30 s (scontrol show config)" in text(result)


@pytest.mark.parametrize(
    ("env", "kill_wait"),
    [({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "20"}, 30), ({"TORCHELASTIC_RUN_ID": "x"}, 60)],
)
def test_a_kill_wait_longer_than_the_grace_is_fine(env: dict[str, str], kill_wait: int) -> None:
    assert timeouts(env, SlurmFacts("1", kill_wait, "scontrol show config")).status is Status.OK


@pytest.mark.parametrize(
    "source",
    ["scontrol not found on PATH", "scontrol show config did not answer within 3 s", "not asked: a saved tree"],
)
def test_an_unknown_kill_wait_is_a_detail_not_an_issue(source: str) -> None:
    result = timeouts({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}, SlurmFacts("9", None, source))
    assert result.status is Status.OK, result
    assert f"SLURM job 9: KillWait unknown ({source}), not checked against torchrun" in result.details


def test_a_grace_shorter_than_the_flight_recorder_dump_wait_cuts_nothing() -> None:
    """The ranks dump before the rank that timed out exits (it sleeps 4 x the dump wait): see the module docstring."""
    env = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "5", "TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC": "60000"}
    result = timeouts(env, SlurmFacts("1", 90, "scontrol show config"))
    assert result.status is Status.OK, result
    assert "the Flight Recorder dumps do not wait on it: the rank that timed out waits 4 x 60 s" in text(result)


def test_a_grace_torchrun_refuses_is_not_also_held_against_kill_wait() -> None:
    result = timeouts({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "1m"}, KILL_WAIT_30)
    assert result.status is Status.FAIL and "KillWait (30 s) is not longer" not in text(result), result


def test_the_job_s_signal_is_shown_when_its_variable_is_there() -> None:
    result = timeouts({"SBATCH_SIGNAL": "B:USR1@90"}, KILL_WAIT_30)
    assert "the job's --signal: SBATCH_SIGNAL=B:USR1@90" in text(result)
    assert "--signal is not visible here" in text(timeouts({}, KILL_WAIT_30))


def test_a_problem_is_never_shown_beside_the_all_fit_line() -> None:
    result = timeouts({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}, KILL_WAIT_30)
    assert result.status is Status.WARN and "the timeouts fit together" not in text(result)
