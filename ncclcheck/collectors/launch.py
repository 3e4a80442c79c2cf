"""Start the smoke ranks through torch's elastic launcher, and end the whole process tree when told to."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil

from ncclcheck.collectors.logfiles import LogSource, lines
from ncclcheck.model.smoke import SET_BY_SMOKE, Launch
from ncclcheck.probes import net, rdzv

KILL_GRACE_S = 2.0


def command(launch: Launch, local_addr: str | None) -> list[str]:
    """``python -m torch.distributed.run ... -m ncclcheck.smoke ...`` for this node."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={launch.nproc}",
        "--max-restarts=0",
        f"--log-dir={os.path.join(launch.log_dir, 'ranks')}",
        "--redirects=3",
    ]
    if launch.nodes == 1 and launch.master_port is None:
        cmd.append("--standalone")  # torchrun picks a free port: never collides with another job's 29400
    elif launch.nodes == 1:
        cmd += [
            "--nnodes=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{launch.master_port}",
            "--rdzv-id=ncclcheck-smoke",
            "--rdzv-conf=is_host=1",
        ]
    else:
        cmd += [
            f"--nnodes={launch.nodes}",
            f"--node-rank={launch.node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={launch.master_addr}:{launch.master_port}",
            "--rdzv-id=ncclcheck-smoke",
        ]
        if launch.node_rank == 0:
            cmd.append("--rdzv-conf=is_host=1")
        if local_addr:
            cmd.append(f"--local-addr={local_addr}")
    return [*cmd, "-m", "ncclcheck.smoke", *launch.worker_args, f"--log-dir={launch.log_dir}"]


def route_interface(master_addr: str) -> tuple[str | None, str | None]:
    """The local address that routes to ``master_addr`` and its interface name."""
    resolved = rdzv.collect(master_addr, None, frozenset()).route_source
    for addr in net.collect().ifaddrs:
        if addr.addr == resolved:
            return resolved, addr.name
    return resolved, None


def environment(launch: Launch, gloo_ifname: str | None) -> dict[str, str]:
    env = dict(os.environ)
    ours = {"NCCLCHECK_LOG_DIR": launch.log_dir}
    if launch.backend == "nccl":
        ours["NCCL_DEBUG"] = "INFO"
        ours["NCCL_DEBUG_FILE"] = os.path.join(launch.log_dir, "nccl.%h.%p.log")
    if gloo_ifname:
        ours["GLOO_SOCKET_IFNAME"] = gloo_ifname
    added = {k: v for k, v in ours.items() if k not in env or k == "NCCLCHECK_LOG_DIR"}
    env.update(added)
    env[SET_BY_SMOKE] = ",".join(sorted(added))
    return env


def start(launch: Launch) -> subprocess.Popen[bytes]:
    os.makedirs(launch.log_dir, exist_ok=True)
    local_addr, ifname = (
        route_interface(launch.master_addr) if launch.nodes > 1 and launch.master_addr else (None, None)
    )
    log = open(os.path.join(launch.log_dir, "torchrun.log"), "wb")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        command(launch, local_addr),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=environment(launch, ifname),
        start_new_session=True,
    )


def end_tree(proc: subprocess.Popen[bytes], extra_pids: Sequence[int]) -> None:
    """End torchrun and every rank (workers run in sessions of their own), leaving no orphan."""
    victims = _tree(proc.pid) + [p for pid in extra_pids if (p := _process(pid)) is not None]
    for victim in victims:
        _signal(victim, signal.SIGTERM)
    deadline = time.time() + KILL_GRACE_S
    for victim in victims:
        try:
            victim.wait(timeout=max(deadline - time.time(), 0.01))
        except psutil.Error:
            _signal(victim, signal.SIGKILL)
    for victim in victims:
        _signal(victim, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)  # SIGKILLed above: reaped at once, unless it is stuck in the kernel (D state)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _tree(pid: int) -> list[psutil.Process]:
    root = _process(pid)
    if root is None:
        return []
    try:
        return [*root.children(recursive=True), root]
    except psutil.Error:
        return [root]


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


def torchrun_log(log_dir: str) -> list[str]:
    """torchrun's own output (its error summary, a rendezvous or import failure); empty if it wrote none."""
    path = os.path.join(log_dir, "torchrun.log")
    return list(lines(LogSource(path, path))) if os.path.exists(path) else []


def nccl_logs(log_dir: str) -> list[tuple[str, list[str]]]:
    """Each NCCL_DEBUG_FILE log the ranks left in the log dir: (path, lines)."""
    paths = sorted(glob.glob(os.path.join(log_dir, "nccl.*.log")))
    return [(path, list(lines(LogSource(path, path)))) for path in paths]


def stderr_path(log_dir: str, local_rank: int) -> str | None:
    """Where torchrun (--redirects) put a local rank's stderr, latest attempt."""
    paths = sorted(glob.glob(os.path.join(log_dir, "ranks", "*", "attempt_*", str(local_rank), "stderr.log")))
    return paths[-1] if paths else None


def last_output(log_dir: str, local_rank: int, lines: int = 5) -> str:
    """The last lines a local rank wrote to stderr."""
    path = stderr_path(log_dir, local_rank)
    if path is None:
        return ""
    with open(path, encoding="utf-8", errors="replace") as handle:
        tail = [line.rstrip() for line in handle.readlines() if line.strip()][-lines:]
    return " | ".join(tail)
