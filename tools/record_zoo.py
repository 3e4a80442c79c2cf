"""Record the zoo's real evidence for the pure tests: tests/fixtures/zoo/<case>.<how>.jsonl, the agent lines
(``ncclcheck.watch-agent/3``) of tests/workers/zoo.py's case, hung on real torchrun/gloo ranks.

  python tools/record_zoo.py [CASE ...]            every case of tests/unit/analysis/watch/test_zoo_replay.py's table by default

``run``: under ``ncclcheck run --stall 3 --interval 1`` (its hook records each rank's point-to-point ops and the
calls c10d skipped; its watch-agent.jsonl is kept); ``watch``: plain torchrun, ``ncclcheck watch --agent`` beside it.
The lines hold absolute paths of this checkout; the pure tests read only the lines, never those files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ncclcheck.model.agent_line import NUMBERS, ROW

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "workers" / "zoo.py"
OUT = REPO / "tests" / "fixtures" / "zoo"
HUNG_S = 9.0  # how long the agent lines are recorded once every rank printed "ready"
KEEP = 3  # lines kept per case (the last ones, with what the earlier ones sent)
# case -> (ranks, how): every case under run; the cases whose evidence differs without run's hook under watch too
CASES = {
    "late-init": (2, ("run",)),
    "world-size": (2, ("run",)),
    "exit-before-init": (2, ("run",)),
    "group-subset": (3, ("run",)),
    "group-order": (3, ("run",)),
    "p2p-cycle": (2, ("run", "watch")),
    "p2p-batch-cycle": (2, ("run", "watch")),
    "wrong-peer": (3, ("run", "watch")),
    "wrong-tag": (2, ("run", "watch")),
    "never-waited": (2, ("run", "watch")),
    "if-rank0": (3, ("run",)),
    "wrong-group": (4, ("run", "watch")),
    "sub-mismatch": (2, ("run", "watch")),
    "dl-stuck": (2, ("run",)),
    "dl-stopped": (2, ("run",)),
    "lock-held": (2, ("run",)),
    "event": (2, ("run",)),
    "queue-empty": (2, ("run",)),
    "thread-died": (2, ("run",)),
    "subprocess": (2, ("run",)),
    "sleep": (2, ("run",)),
    "socket": (2, ("run",)),
    "compute": (2, ("run",)),
    "checkpoint": (2, ("run",)),
    "killed": (2, ("run",)),
    "crash": (2, ("run",)),
}


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER)]


def ready(log: Path, nproc: int, deadline_s: float = 90.0) -> None:
    end = time.monotonic() + deadline_s
    while log.read_text(errors="replace").count("ready ") < nproc:
        if time.monotonic() > end:
            raise SystemExit(f"no ready lines in {log}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    for kid in kids:
        try:
            kid.send_signal(signal.SIGCONT)
            kid.kill()
        except psutil.Error:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def record(case: str, nproc: int, how: str, work: Path) -> None:
    scratch = work / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "CASE": case, "ZOO_DIR": str(scratch)}
    log = work / f"{case}.{how}.log"
    target = OUT / f"{case}.{how}.jsonl"
    if how == "run":
        run_dir = work / f"run-{case}"
        cmd = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(run_dir), "--stall", "3", "--interval", "1"]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*cmd, "--", *torchrun(nproc)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            ready(log, nproc)
            time.sleep(HUNG_S)
        finally:
            stop(proc)
        shutil.copyfile(run_dir / "watch-agent.jsonl", target)
    else:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                torchrun(nproc), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            ready(log, nproc)
            with target.open("wb") as lines:
                agent = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "ncclcheck",
                        "watch",
                        "--agent",
                        "--pid",
                        str(proc.pid),
                        "--interval",
                        "1",
                        "--stall",
                        "3",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=lines,
                    env=env,
                )
                time.sleep(HUNG_S)
                agent.terminate()
                agent.wait(10)
        finally:
            stop(proc)
    compact(target)
    print(f"{target.relative_to(REPO)}: {sum(1 for _ in target.open())} lines")


def compact(path: Path, keep: int = KEEP) -> None:
    """Keep the last ``keep`` lines, the first of them carrying what the viewer would hold from the lines before:
    every rank in full (schema /3 sends a rank whose state did not change as a row: its last full entry with the
    row's numbers), each rank's last stack, closer look and place table (sent only when they change), the last
    Flight Recorders."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if len(lines) <= keep:
        return
    full: dict[int, dict[str, object]] = {}
    apart: dict[tuple[int, str], object] = {}
    flight = None
    for line in lines[:-keep]:
        flight = line.get("flight", flight)
        for r in line.get("ranks", []):
            if isinstance(r, dict):
                full[r["rank"]] = r
                for key in ("stack", "deep", "places"):
                    if key in r:
                        apart[(r["rank"], key)] = r[key]
    first = lines[-keep]
    if flight is not None and "flight" not in first:
        first["flight"] = flight
    ranks = []
    for r in first.get("ranks", []):
        if isinstance(r, list):  # a row: its last full entry with these numbers and rounds
            base = {k: v for k, v in full[r[0]].items() if k not in ("stack", "deep", "places", "counts", "rounds")}
            r = {**base, **dict(zip(NUMBERS, r[2:ROW])), "version": r[1], **({"counts": r[ROW:]} if r[ROW:] else {})}
        for key in ("stack", "deep", "places"):
            if key not in r and (r["rank"], key) in apart:
                r[key] = apart[(r["rank"], key)]
        ranks.append(r)
    first["ranks"] = ranks
    path.write_text("".join(json.dumps(x) + "\n" for x in lines[-keep:]))


def main(cases: list[str]) -> None:
    if cases[:1] == ["--compact"]:  # lines recorded before: compacted again
        for path in sorted(OUT.glob("*.jsonl")):
            compact(path)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ncc-zoo-"))
    try:
        for case in cases or list(CASES):
            nproc, hows = CASES[case]
            for how in hows:
                record(case, nproc, how, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
