"""probes/slurm.py for real: run alone outside SLURM, cut at its bound when a real ``scontrol`` hangs,
and KillWait read by the collector from a real SLURM."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from slurm_cluster import fake_scontrol, slurm_cluster

from ncclcheck.probes import slurm


@pytest.mark.integration
def test_the_collector_reads_kill_wait_from_a_real_slurm() -> None:
    with slurm_cluster() as env:
        facts = slurm.collect({**env, "SLURM_JOB_ID": "1"}, timeout_s=10)
    assert facts == slurm.SlurmFacts("1", 30, "scontrol show config"), facts  # the test cluster keeps the default


@pytest.mark.integration
def test_a_real_scontrol_that_hangs_is_cut_at_the_bound(tmp_path: Path) -> None:
    env = fake_scontrol(tmp_path, f"exec {shutil.which('sleep')} 60")
    facts = slurm.collect(env, timeout_s=0.5)
    assert facts == slurm.SlurmFacts("4242", None, "scontrol show config did not answer within 0.5 s")


@pytest.mark.integration
def test_the_probe_runs_alone_outside_slurm() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    probe = REPO / "probes" / "slurm.py"
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "null", done.stderr
