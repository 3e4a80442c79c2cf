"""Record real py-spy text dumps of the zoo's hung ranks, as a user pastes them: tests/fixtures/pyspy_text/<case>.txt.

  python tools/record_dumps.py [CASE ...]

Each case of tests/workers/zoo.py runs on plain torchrun/gloo; once every rank printed "ready" and HUNG_S passed, the
ranks (torchrun's children) are dumped one after another with ``py-spy dump --pid`` (``--native`` where the table
says), under the command a user would type, the way pastes in issue threads look. Paths are this checkout's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from record_zoo import REPO, WORKER, ready, stop  # tools/ is this script's folder: the zoo's own launcher helpers

OUT = REPO / "tests" / "fixtures" / "pyspy_text"
PYSPY = Path(sys.executable).parent / "py-spy"
HUNG_S = 4.0
# case -> (ranks, native)
CASES = {
    "late-init": (2, False),
    "dl-stuck": (2, False),
    "lock-held": (2, True),
    "if-rank0": (3, False),
    "sub-mismatch": (2, False),
    "p2p-cycle": (2, False),
    "compute": (2, False),
    "group-subset": (3, False),
}


def record(case: str, nproc: int, native: bool, work: Path) -> None:
    scratch = work / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "CASE": case, "ZOO_DIR": str(scratch)}
    log = work / f"{case}.log"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready(log, nproc)
        time.sleep(HUNG_S)
        ranks = sorted(psutil.Process(proc.pid).children(), key=lambda p: p.pid)
        flag = " --native" if native else ""
        text = [f"$ pgrep -P {proc.pid} | xargs -I {{}} py-spy dump{flag} --pid {{}}\n"]
        for rank in ranks:
            argv = [str(PYSPY), "dump", "--pid", str(rank.pid), *(["--native"] if native else [])]
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
            text.append(done.stdout + done.stderr)
    finally:
        stop(proc)
    target = OUT / f"{case}.txt"
    target.write_text("".join(text))
    print(f"{target.relative_to(REPO)}: {len(ranks)} ranks")


def main(cases: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ncc-dumps-"))
    try:
        for case in cases or list(CASES):
            record(case, *CASES[case], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
