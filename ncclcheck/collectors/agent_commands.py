"""How the watch agents are started on every node. The agent command is this interpreter and this package
(``python -m ncclcheck watch --agent ...``), or ``--agent-cmd`` where ncclcheck lives elsewhere on the nodes. ``--fanout CMD``: ``{}`` in CMD becomes the
agent command (shell-quoted), else it is appended. ``--slurm J``: one ``srun --overlap`` step with one task
per node of job J, run with this shell's own SLURM step variables cleared (they would clamp srun to the
current step), stdin forwarded to every task so that the agents end when the viewer does.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

KEEP_SLURM = ("SLURM_CONF",)  # the rest of SLURM_* in the viewer's shell describes its own step, not job J


def agent_command(
    interval_s: float,
    stall_s: float,
    job: str | None,
    native: bool,
    no_stacks: bool,
    agent_cmd: str | None,
    slurm_job: str | None = None,
) -> list[str]:
    base = shlex.split(agent_cmd) if agent_cmd else [sys.executable, "-m", "ncclcheck"]
    argv = [*base, "watch", "--agent", "--interval", f"{interval_s:g}", "--stall", f"{stall_s:g}"]
    argv += ["--job", job] if job else []
    argv += ["--slurm-job", slurm_job] if slurm_job else []
    argv += ["--native"] if native else []
    argv += ["--no-stacks"] if no_stacks else []
    return argv


def fanout_command(template: str, agent: list[str]) -> str:
    """The user's command with the agent command, each word shell-quoted, in place of ``{}`` (``ssh $h {}``,
    ``kubectl exec pod -- {}``), or else after it (``pdsh -w node[1-16]``)."""
    words = shlex.join(agent)
    return template.replace("{}", words) if "{}" in template else f"{template} {words}"


def slurm_command(job_id: str, nodes: int | None, agent: list[str]) -> tuple[list[str], dict[str, str]]:
    """srun's argv and environment for one agent per node of job ``job_id``."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        "--input=all",
        "--unbuffered",
        "--job-name=ncclcheck-watch",
    ]
    if nodes:
        argv += [f"--nodes={nodes}", f"--ntasks={nodes}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k in KEEP_SLURM}
    return [*argv, *agent], env


def slurm_nodes(job_id: str) -> tuple[str, ...]:
    """The nodes job ``job_id`` holds, by name (squeue's node list, expanded by scontrol); () when SLURM cannot say."""
    squeue, scontrol = shutil.which("squeue"), shutil.which("scontrol")
    if squeue is None or scontrol is None:
        return ()
    try:
        listed = subprocess.run([squeue, "-h", "-j", job_id, "-o", "%N"], capture_output=True, text=True, timeout=20)
        nodelist = listed.stdout.strip().splitlines()[:1]
        if not nodelist or not nodelist[0].strip():
            return ()
        names = subprocess.run(
            [scontrol, "show", "hostnames", nodelist[0].strip()], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(n.strip() for n in names.stdout.split() if n.strip())
