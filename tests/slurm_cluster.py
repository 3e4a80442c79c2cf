"""A real one-node SLURM cluster on this machine for the tests: Debian's slurm-wlm (installed here when missing
and apt can), a private munged, slurmctld and slurmd, all on private sockets, ports and directories.

``slurm_cluster()`` yields the environment a client needs (SLURM_CONF) or skips saying why it cannot be made
(not root, no apt, daemons that will not start). Everything it started is stopped afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("slurmctld", "slurmd", "munged")
CONF = """ClusterName=ncclcheck
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def ensure(tools: tuple[str, ...], packages: tuple[str, ...]) -> str | None:
    """Install ``packages`` with apt when one of ``tools`` is missing; why they cannot be, or None."""
    if all(shutil.which(t) for t in tools):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{' '.join(packages)} not installed, and cannot be here (needs root and apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    try:
        done = subprocess.run(install, capture_output=True, text=True, timeout=600, env=env, check=False)
        if done.returncode != 0:
            subprocess.run(["apt-get", "update"], capture_output=True, timeout=300, env=env, check=False)
            done = subprocess.run(install, capture_output=True, text=True, timeout=600, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"apt-get install {' '.join(packages)} failed: {exc}"
    if done.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {done.stderr.strip().splitlines()[-1:]}"
    missing = [t for t in tools if not shutil.which(t)]
    return f"{', '.join(missing)} still missing after apt-get install" if missing else None


def _free_ports(n: int) -> list[int]:
    """``n`` TCP ports nothing listens on now, distinct."""
    held = [socket.socket() for _ in range(n)]
    try:
        for s in held:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _stop(pidfile: Path) -> None:
    with suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)


@contextmanager
def slurm_cluster() -> Iterator[dict[str, str]]:
    why = ensure(DAEMONS, PACKAGES)
    if why:
        pytest.skip(f"no SLURM here: {why}")
    host = socket.gethostname().split(".")[0]
    base = Path(tempfile.mkdtemp(prefix="ncc-slurm-", dir="/tmp"))  # short: munge's socket path
    (base / "state").mkdir()
    (base / "spool").mkdir()
    conf = base / "slurm.conf"
    # ports of its own: two tests of two xdist workers may each run a cluster at once (fixed ones: one of them
    # skipped with "Address already in use")
    ctld_port, slurmd_port = _free_ports(2)
    conf.write_text(
        CONF.format(host=host, dir=base, cpus=os.cpu_count() or 1, ctld_port=ctld_port, slurmd_port=slurmd_port)
    )
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        munged = subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={base}/munge.sock",
                f"--key-file={key}",
                f"--log-file={base}/munged.log",
                f"--pid-file={base}/munged.pid",
                f"--seed-file={base}/munged.seed",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if munged.returncode != 0:
            pytest.skip(f"no SLURM here: munged would not start: {munged.stderr.strip()}")
        for daemon in (["slurmctld", "-c"], ["slurmd"]):
            started = subprocess.run(daemon, capture_output=True, text=True, timeout=60, env=env, check=False)
            if started.returncode != 0:
                pytest.skip(f"no SLURM here: {daemon[0]} would not start: {started.stderr.strip()}")
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env, check=False)
            if state.stdout.strip() in ("idle", "mixed", "allocated"):
                break
            if time.monotonic() > deadline:
                logs = (base / "slurmctld.log").read_text(errors="replace")[-400:]
                pytest.skip(f"no SLURM here: the node never came up ({state.stdout.strip()}): {logs}")
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], capture_output=True, env=env, timeout=30, check=False)
        _ended(env, conf)
        for name in ("slurmd", "slurmctld", "munged"):
            _stop(base / f"{name}.pid")
        time.sleep(1)
        shutil.rmtree(base, ignore_errors=True)


def _ended(env: dict[str, str], conf: Path, within_s: float = 60.0) -> None:
    """Wait (bounded) until no job is left and no process of this cluster's jobs runs; then end any that does."""
    import psutil

    def ours() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if (
                    proc.pid != os.getpid()
                    and proc.environ().get("SLURM_CONF") == str(conf)
                    and "SLURM_JOB_ID" in proc.environ()
                ):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        jobs = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=env, check=False).stdout.strip()
        if not jobs and not ours():
            return
        time.sleep(0.5)
    for proc in ours():
        with suppress(psutil.Error):
            proc.kill()


def fake_scontrol(tmp_path: Path, script: str) -> dict[str, str]:
    """An environment in a SLURM job whose PATH holds only a ``scontrol`` running ``script`` (sh)."""
    tool = tmp_path / "scontrol"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": str(tmp_path), "SLURM_JOB_ID": "4242"}
