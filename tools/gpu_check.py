"""The prepared device check (``make gpu-check``): on one lent GPU, capture what a real NCCL hang shows and pack it
into one tarball under $OUT (or ./gpu-check-out), to land as fixtures.

  python tools/gpu_check.py [--dry] [--cases skip,mismatch,...] [--budget SECONDS]

Captured, each step bounded so the whole fits in about 8 minutes (``--budget``, default 420 s):
- ``nvidia-smi -q`` and ``ncclcheck env --json`` of the GPU node; ``ncclcheck smoke --backend nccl --nproc 1``;
- each case of tests/workers/nccl_gpu.py (two ranks on the one GPU, a different NCCL_HOSTID each) under
  ``ncclcheck run --stall 6 --on-hang exit`` with NCCL_DEBUG=INFO to a file and the Flight Recorder on; while it hangs:
  ``py-spy dump --native`` of every rank, ``watch --once --json`` beside run, NCCL RAS's reply
  (``ncclcheck.collectors.ras``), the GPU's utilisation, power and clocks (NVML through nvidia-ml-py, else
  nvidia-smi), and run's directory (its verdict, hang record, Flight Recorders, the ranks' logs);
- the gpu test tier (``pytest -m gpu``), its output.
``--dry`` runs the same on gloo/CPU (no GPU: NVML and RAS say why they are absent): proof that it runs.
Every child tree is ended at each case's end and on the way out; nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "workers" / "nccl_gpu.py"
CASES = ("skip", "mismatch", "p2p", "dies", "before", "sleep", "newgroup", "healthy")
CASE_S = 45  # the most one case may take, hang and capture included
MAX_TAR = 15 << 20


def sh(argv: list[str], out: Path, timeout: float, env: dict[str, str] | None = None) -> int | None:
    """Run one command to a file, bounded; its exit code (None: ended at its bound or missing)."""
    with out.open("wb") as handle:
        try:
            proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            handle.write(f"could not start {argv[0]}: {exc}\n".encode())
            return None
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            end(proc)
            handle.write(f"\n[gpu_check: ended after {timeout:.0f} s]\n".encode())
            return None


def end(proc: subprocess.Popen[bytes]) -> None:
    """The whole process group: SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def gpu_reading() -> dict[str, object]:
    """The GPUs as ncclcheck's own collector reads them (NVML), or why it cannot."""
    from ncclcheck.collectors.gpu import look

    return dataclasses.asdict(look())


def cmdline(process: object) -> str:
    """A process's command line, or "" where it ended or turned zombie since it was listed."""
    import psutil

    try:
        return " ".join(process.cmdline() or [])  # type: ignore[attr-defined]
    except psutil.Error:
        return ""


def launcher_of(run_pid: int) -> int | None:
    """The torchrun agent under ``ncclcheck run``, if it is still there."""
    import psutil

    try:
        kids = psutil.Process(run_pid).children(recursive=True)
    except psutil.Error:
        return None
    return next((p.pid for p in kids if "torch.distributed.run" in cmdline(p)), None)


def ranks_of(launcher: int) -> list[int]:
    import psutil

    try:
        agent = psutil.Process(launcher)
        kids = agent.children(recursive=True)
    except psutil.Error:
        return []
    return sorted(p.pid for p in kids if "nccl_gpu.py" in cmdline(p))


def case(name: str, dry: bool, out: Path, py: str) -> dict[str, object]:
    """One hang under run, with the evidence taken while it hangs."""
    work = out / name
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "MODE": name,
        "BACKEND": "gloo" if dry else "nccl",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,COLL,P2P,NET,ENV,RAS",
        "NCCL_DEBUG_FILE": str(work / "nccl.%h.%p.log"),
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "PYTHONUNBUFFERED": "1",
    }
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)]
    run = [py, "-m", "ncclcheck", "run", "--dir", str(work / "run"), "--stall", "6", "--on-hang", "exit", "--"]
    log = (work / "run.out").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen([*run, *torchrun], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    took: dict[str, object] = {"case": name}
    try:
        while time.monotonic() - started < 30 and (work / "run.out").read_text(errors="replace").count("ready ") < 2:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        time.sleep(3)
        took["gpu_hung"] = gpu_reading()

        launcher = launcher_of(proc.pid) if proc.poll() is None else None
        pids = ranks_of(launcher) if launcher else []
        took["ranks"] = pids
        for pid in pids:
            sh(["py-spy", "dump", "--native", "--pid", str(pid)], work / f"pyspy_native_{pid}.txt", 20)
        if launcher:
            sh(
                [py, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(launcher)],
                work / "watch_once.json",
                40,
            )
        ras = subprocess.run(
            [
                py,
                "-c",
                "import dataclasses,json;from ncclcheck.collectors.ras import query;"
                "r=query();print(json.dumps({'address':r.address,'error':r.error,'text':r.text,'protocol':r.protocol,"
                "'status':dataclasses.asdict(r.status) if r.status else None}))",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        (work / "ras.json").write_text(ras.stdout + ras.stderr)
        left = CASE_S - (time.monotonic() - started)
        try:
            took["run_exit"] = proc.wait(max(left, 5))
        except subprocess.TimeoutExpired:
            took["run_exit"] = None
    finally:
        end(proc)
        log.close()
    took["seconds"] = round(time.monotonic() - started, 1)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="gloo on CPU: no GPU needed")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--budget", type=float, default=420.0)
    args = parser.parse_args()
    target = Path(os.environ.get("OUT") or REPO / "gpu-check-out")
    target.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    begun = time.monotonic()

    def step(what: str) -> None:
        print(f"gpu_check: {what} at {time.monotonic() - begun:.0f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        out = Path(tmp) / "gpu_check"
        out.mkdir()
        summary: dict[str, object] = {"dry": args.dry, "started": time.time(), "cases": []}
        try:  # whatever happens, what was captured is packed
            step("nvidia-smi -q")
            sh(["nvidia-smi", "-q"], out / "nvidia_smi_q.txt", 30)
            step("env")
            sh([py, "-m", "ncclcheck", "env", "--json"], out / "env.json", 60)
            (out / "gpu_idle.json").write_text(json.dumps(gpu_reading(), indent=1))
            backend = "gloo" if args.dry else "nccl"
            smoke = [py, "-m", "ncclcheck", "smoke", "--backend", backend, "--nproc", "1" if not args.dry else "2"]
            step("smoke")
            summary["smoke_exit"] = sh([*smoke, "--json", str(out / "smoke.json")], out / "smoke.out", 90)
            cases: list[object] = []
            for name in [c for c in args.cases.split(",") if c]:
                if name == "sleep" and args.dry:
                    continue  # torch.cuda._sleep needs a GPU
                if time.monotonic() - begun > args.budget - CASE_S - 60:
                    cases.append({"case": name, "skipped": "out of the time budget"})
                    continue
                step(f"case {name}")
                try:
                    cases.append(case(name, args.dry, out, py))
                except Exception as exc:  # one case's failure must not lose what the others captured
                    cases.append({"case": name, "error": f"{type(exc).__name__}: {exc}"})
                summary["cases"] = cases
                (out / "summary.json").write_text(json.dumps(summary, indent=1))
            if not args.dry and time.monotonic() - begun < args.budget - 60:
                step("pytest -m gpu")
                summary["pytest_gpu_exit"] = sh(
                    [py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"], out / "pytest_gpu.txt", 120
                )
        finally:
            summary["seconds"] = round(time.monotonic() - begun, 1)
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
            pack(out, target)
    print(json.dumps(summary, indent=1))
    return 0


def pack(out: Path, target: Path) -> None:
    """Everything captured so far, as one tarball under target, and the summary beside it."""
    tar = target / "gpu_check.tar.gz"
    with tarfile.open(tar, "w:gz") as packed:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.stat().st_size < 4 << 20 and "__pycache__" not in path.parts:
                packed.add(path, arcname=str(path.relative_to(out.parent)))
    if tar.stat().st_size > MAX_TAR:
        print(f"gpu_check: {tar} is {tar.stat().st_size >> 20} MiB: over what comes back", file=sys.stderr)
    shutil.copy(out / "summary.json", target / "summary.json")


if __name__ == "__main__":
    sys.exit(main())
