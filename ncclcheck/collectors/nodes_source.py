"""The data source of a multi-node ``watch``: agents started on every node through SLURM or the user's own
fan-out tool (or lines collected before), merged into one job-wide state at each poll.

The agent command is this interpreter and this package (``python -m ncclcheck watch --agent ...``), or
``--agent-cmd`` where ncclcheck lives elsewhere on the nodes. ``--fanout CMD``: ``{}`` in CMD becomes the
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
import time

from ncclcheck.analysis.watch import Judging
from ncclcheck.analysis.watch_nodes import SILENT_INTERVALS, SILENT_MIN_S, merge
from ncclcheck.collectors.agent_streams import FanOut, Streams, replay
from ncclcheck.model.watch import Verdict, WatchState

KEEP_SLURM = ("SLURM_CONF",)  # the rest of SLURM_* in the viewer's shell describes its own step, not job J


def agent_command(interval_s: float, stall_s: float, job: str | None, native: bool, no_stacks: bool,
                  agent_cmd: str | None) -> list[str]:  # fmt: skip
    base = shlex.split(agent_cmd) if agent_cmd else [sys.executable, "-m", "ncclcheck"]
    argv = [*base, "watch", "--agent", "--interval", f"{interval_s:g}", "--stall", f"{stall_s:g}"]
    argv += ["--job", job] if job else []
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
    argv = ["srun", f"--jobid={job_id}", "--overlap", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
            "--input=all", "--unbuffered", "--job-name=ncclcheck-watch"]  # fmt: skip
    if nodes:
        argv += [f"--nodes={nodes}", f"--ntasks={nodes}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k in KEEP_SLURM}
    return [*argv, *agent], env


def slurm_nodes(job_id: str) -> int | None:
    """How many nodes job ``job_id`` holds (squeue), or None when squeue cannot say."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return None
    try:
        done = subprocess.run([squeue, "-h", "-j", job_id, "-o", "%D"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1]
    return int(first[0]) if first and first[0].strip().isdigit() else None


class NodesSource:
    """Each ``poll`` merges the latest line of every node's agent; ``close`` ends the fan-out."""

    def __init__(self, stall_s: float, interval_s: float, fanout: FanOut | None = None,
                 recorded: Streams | None = None, expected_nodes: int | None = None) -> None:  # fmt: skip
        self.judging, self.interval_s = Judging(stall_s), interval_s
        self.fanout, self.recorded, self.expected_nodes = fanout, recorded, expected_nodes
        self.begun = time.monotonic()
        self.state: WatchState | None = None

    @classmethod
    def from_file(cls, path: str, stall_s: float, interval_s: float) -> NodesSource:
        return cls(stall_s, interval_s, recorded=replay(path))

    def poll(self, final: bool = False) -> WatchState:
        judging = Judging(self.judging.stall_s, final)
        if self.fanout is not None:
            with self.fanout.lock:
                reports, text = (
                    dict(self.fanout.streams.reports),
                    {k: list(v) for k, v in self.fanout.streams.text.items()},
                )
            now = time.time()
            grace = max(SILENT_MIN_S, SILENT_INTERVALS * self.interval_s)
            started = time.monotonic() - self.begun > grace or not self.fanout.running()
        else:
            assert self.recorded is not None
            reports, text = self.recorded.reports, {k: list(v) for k, v in self.recorded.text.items()}
            now = max((r.received for r in reports.values()), default=0.0)
            started = True
        state = merge(reports, text, now, judging, self.interval_s, started, self.expected_nodes)
        if not started and (not reports or any(n.agent == "missing" for n in state.nodes)):
            heard = sum(1 for n in state.nodes if n.agent != "missing")
            waiting = f"… starting the agents: {heard}{f'/{len(state.nodes)}' if state.nodes else ''} nodes reporting"
            state = WatchState(state.time, state.job, state.ranks, state.findings, Verdict("pending", waiting),
                               state.window_s, state.samples, state.notes, state.launcher_running, state.nodes)  # fmt: skip
        self.state = state
        return state

    def ended(self) -> bool:
        """Nothing more will come: the fan-out ended (or the lines were recorded)."""
        return self.fanout is None or not self.fanout.running()

    def close(self) -> None:
        if self.fanout is not None:
            self.fanout.close()
