"""``ncclcheck watch --slurm JOBID`` into a real SLURM job: a one-node cluster on this machine (slurmctld, slurmd,
munged), a torchrun/gloo job submitted with sbatch, and the agents started through a real ``srun --overlap``.
Another torch job runs on the same node outside SLURM: the agent must watch only the SLURM job's ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import WORKERS
from slurm_cluster import slurm_cluster
from test_watch_real import stop_tree

# Two test hosts (or a SLURM cluster) each run a whole job, and watch agents are found by their command line:
# one such test at a time, on one xdist worker (the group is shared with test_watch_agents and test_run).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("agents_and_test_hosts")]

WORKER = WORKERS / "watch_job.py"


def wait_ready(log: Path, ranks: int, what: str) -> None:
    deadline = time.monotonic() + 120
    while not log.exists() or log.read_text(errors="replace").count("ready") < ranks:
        assert time.monotonic() < deadline, (
            f"{what} never started: {log.read_text(errors='replace') if log.exists() else ''}"
        )
        time.sleep(0.3)


def test_watch_slurm_installs_slurm_wlm_and_sees_the_job_s_ranks_through_srun_overlap(tmp_path: Path) -> None:
    torchrun = f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node=2 --monitor-interval=600"
    with slurm_cluster() as env:
        out = tmp_path / "job.out"
        submitted = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--ntasks=1",
                "--cpus-per-task=1",
                f"--output={out}",
                f"--wrap=exec {torchrun} {WORKER}",
            ],
            capture_output=True,
            text=True,
            env={**env, "MODE": "straggler", "STUCK_RANK": "1"},
            timeout=60,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip().split(";")[0]
        outside_log = tmp_path / "outside.log"
        outside = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                "--monitor-interval=600",
                str(WORKER),
            ],
            env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"MODE": "healthy"},
            stdout=outside_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_ready(out, 2, f"SLURM job {job_id}")
            wait_ready(outside_log, 2, "the job outside SLURM")
            viewer_env = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}
            done = subprocess.run(
                [sys.executable, "-m", "ncclcheck", "watch", "--slurm", job_id, "--once", "--json", "--stall", "4"],
                capture_output=True,
                text=True,
                env=viewer_env,
                timeout=180,
                check=False,
            )
            steps = subprocess.run(["squeue", "-h", "-s", "-j", job_id], capture_output=True, text=True, env=env)
        finally:
            stop_tree(outside)
            subprocess.run(["scancel", job_id], env=env, timeout=30, check=False)
        deadline = time.monotonic() + 60
        while any(  # this SLURM job's ranks (another xdist worker's jobs carry no SLURM_JOB_ID of it)
            "watch_job.py" in " ".join(p.info["cmdline"] or [])
            and (p.info["environ"] or {}).get("SLURM_JOB_ID") == job_id
            for p in psutil.process_iter(["cmdline", "environ"])
        ):
            assert time.monotonic() < deadline, "the job's ranks outlived scancel"
            time.sleep(0.5)
    assert done.stdout, done.stderr
    seen = json.loads(done.stdout)
    host = os.uname().nodename.split(".")[0]
    assert [(n["host"], n["agent"], n["ranks"]) for n in seen["nodes"]] == [(host, "ok", [0, 1])], seen["nodes"]
    assert done.returncode == 1 and [(f["kind"], f["culprits"]) for f in seen["findings"]] == [("straggler", [1])]
    message = seen["findings"][0]["message"]
    assert "rank 1, at watch_job.py:27 in slow_batch" in message and "is not in any collective" in message  # one host
    assert [(r["rank"], r["host"]) for r in seen["ranks"]] == [(0, host), (1, host)]
    # The viewer's step is gone with it: only the batch step was left in the job.
    assert "ncclcheck-watch" not in steps.stdout, steps.stdout
