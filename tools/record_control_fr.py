"""Record real ``fr_trace_json`` answers for tests/fixtures/control_plane/<name>/: run tests/workers/subgroup_skip.py
under torchrun with run's control plane hook, wait until every rank printed "ready" and WAIT_S more seconds, ask
every rank's control plane, write fr_rank<N>.json (and stacks_rank<N>.txt), end the job.

  python tools/record_control_fr.py NAME NPROC [VAR=VALUE ...]   e.g.  skip 4 MODE=skip
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ncclcheck.collectors.control_plane import fetch, sockets_in  # noqa: E402

WAIT_S = float(os.environ.get("WAIT_S", "2"))


def main(name: str, nproc: int, extra: list[str]) -> None:
    out = REPO / "tests" / "fixtures" / "control_plane" / name
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ncc-rec-"))
    control, hook = work / "control", work / "control" / "hook"
    hook.mkdir(parents=True)
    control.chmod(0o700)  # the hook serves only from a private directory
    shutil.copy(REPO / "ncclcheck" / "collectors" / "control_hook.py", hook / "sitecustomize.py")
    env = {**os.environ, "PYTHONPATH": str(hook), "NCCLCHECK_CONTROL_DIR": str(control), "HANG_S": "30"}
    env.update(v.split("=", 1) for v in extra)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    job = subprocess.Popen(
        [*cmd, str(REPO / "tests" / "workers" / "subgroup_skip.py")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready = 0
        while ready < nproc and job.stdout is not None:
            line = job.stdout.readline()
            if not line:
                raise SystemExit("the job ended before every rank was ready")
            ready += line.count("ready ")  # python -u writes "ready N" and its newline apart: lines of ranks interleave
        time.sleep(WAIT_S)
        for a in fetch(sockets_in(str(control))):
            (out / f"fr_rank{a.rank}.json").write_bytes(a.body("fr_trace_json") or b"")
            (out / f"stacks_rank{a.rank}.txt").write_bytes(a.body("dump_traceback") or b"")
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
