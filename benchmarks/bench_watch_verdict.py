"""How fast does ``ncclcheck watch --once`` answer on a job that is already stuck, and is it ever wrong on a
healthy one? Real torchrun/gloo jobs (tests/workers/watch_job.py), each stuck for a few seconds before the
watcher starts, as a user would meet them.

1. Time to verdict per scenario: the wall time of ``python -m ncclcheck watch --once --json --pid P`` (the
   command a user types, interpreter start-up included), with the default settings; the baseline in the
   same run is reading the same ranks by hand: ``py-spy dump --nonblocking`` of each rank, one after the
   other. Goal: a mismatch, a p2p cycle, a root mismatch and a sub-group skip answered in <= 3 s, with the
   right finding and never the waiting rank blamed.
2. False findings on a job that runs: the live source sampling an uneven job (the last rank 0.8 s slower per
   step, so the others wait in all_reduce every step) with a thread printing 5 lines a second on every rank,
   at the live view's pace, for --healthy-s seconds (default 600): every sample with a finding of a hang is a
   false one; naming rank 1 as the slow rank (``slow-rank``, fail-slow) is the right answer, counted apart.
Usage: python benchmarks/bench_watch_verdict.py [--healthy-s 600] [--only WORDS]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from _timing import by_hand  # benchmarks/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "watch"))
from test_watch_real import stop_tree

from ncclcheck.analysis.watch.judge import next_delay
from ncclcheck.collectors.jobs import discover
from ncclcheck.sources.watch import LiveSource

WORKERS = Path(__file__).resolve().parents[1] / "tests" / "workers"
WORKER = WORKERS / "watch_job.py"
STUCK_FOR_S = 5.0  # how long each job has been stuck before the watcher starts


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str
    nproc: int = 2
    env: tuple[tuple[str, str], ...] = ()
    signal_last: int | None = None  # sent to the last rank once it is stuck
    expect: str = ""  # the finding kind a right answer holds ("" for none)
    script: str = "watch_job.py"  # the worker under tests/workers
    culprits: tuple[int, ...] | None = None  # the right answer's culprits, where one is exact (None: not checked)
    not_culprits: tuple[int, ...] = ()  # ranks a right answer never blames (the rank that waits)


SCENARIOS = (
    Scenario("mismatch, 3 ranks (all_reduce vs broadcast)", "op", 3, expect="mismatch"),
    Scenario("mismatch, 2 ranks (a tie)", "op", expect="mismatch"),
    Scenario("order mismatch, 2 ranks", "order", expect="mismatch"),
    Scenario("rank SIGSTOPped, the others wait", "straggler", 3, signal_last=signal.SIGSTOP, expect="dead"),
    Scenario("straggler in user code", "straggler", 3, expect="straggler"),
    Scenario("straggler, every rank logging from a thread", "straggler", 3, (("CHATTY", "1"),), expect="straggler"),
    Scenario("p2p deadlock: both ranks recv first", "p2p_deadlock", 2, expect="p2p-deadlock", script="args_job.py"),
    Scenario("p2p deadlock: a ring of 3", "ring3", 3, expect="p2p-deadlock", script="args_job.py"),
    Scenario("reduce, each rank its own dst", "reduce_dst", 2, expect="root-mismatch", script="args_job.py"),
    Scenario(
        "sub-group skip: rank 3 skips its pair all_reduce",
        "pairs",
        4,
        expect="subgroup-wait",
        script="args_job.py",
        not_culprits=(2,),
    ),
    Scenario("healthy (for comparison)", "healthy", 2, expect=""),
)


def start(
    mode: str, nproc: int, env: dict[str, str], script: str = "watch_job.py"
) -> tuple[subprocess.Popen[bytes], Path]:
    log = Path(f"/tmp/ncclcheck-bench-{os.getpid()}-{mode}.log")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--monitor-interval=600",
        str(WORKERS / script),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "MODE": mode, **env}
        )
    deadline = time.monotonic() + 120
    while not all(f"ready {r}" in log.read_text(errors="replace") for r in range(nproc)):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(log.read_text(errors="replace"))
        time.sleep(0.1)
    return proc, log


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    stop_tree(proc)
    log.unlink(missing_ok=True)


def ranks(proc: subprocess.Popen[bytes]) -> list[int]:
    return sorted(
        (p for p in psutil.Process(proc.pid).children(recursive=True) if "RANK" in p.environ()),
        key=lambda p: int(p.environ()["RANK"]),
    )  # type: ignore[return-value]


def time_to_verdict(s: Scenario) -> tuple[float, float, str, bool]:
    proc, log = start(s.mode, s.nproc, dict(s.env), s.script)
    try:
        procs = ranks(proc)
        if s.signal_last is not None:
            time.sleep(1.0)  # the others are in their collective by now
            procs[-1].send_signal(s.signal_last)
        time.sleep(STUCK_FOR_S)
        begin = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "watch", "--once", "--json", "--pid", str(proc.pid)],
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.perf_counter() - begin
        if not done.stdout.strip():
            return took, 1.0, f"no report: {done.stderr.strip()[:120]}", False
        report = json.loads(done.stdout)
        kinds = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
        right = (s.expect in kinds) if s.expect else not kinds
        blamed = {r for f in report["findings"] for r in f["culprits"]}
        if (s.culprits is not None and blamed != set(s.culprits)) or blamed & set(s.not_culprits):
            right = False
        hand = by_hand([p.pid for p in procs if p.status() != psutil.STATUS_ZOMBIE and p.status() != "stopped"])
        return took, hand, ",".join(kinds) or report["verdict"]["status"], right
    finally:
        stop(proc, log)


def false_findings(seconds: float, interval: float = 1.5) -> tuple[int, int, int, int]:
    """Samples taken, samples with a finding of a hang (false), samples whose verdict was 'pending' (watching, not
    judged), samples that named rank 1 the slow rank (right: it is 0.8 s slower a step)."""
    proc, log = start("uneven", 2, {"CHATTY": "1"})
    source = None
    try:
        source = LiveSource(discover(proc.pid)[0], 10.0)
        end, samples, flagged, pending, slow, state = time.monotonic() + seconds, 0, 0, 0, 0, None
        while time.monotonic() < end:
            state = source.poll()
            samples += 1
            wrong = [f for f in state.findings if (f.id, f.culprits) != ("slow-rank", (1,))]
            flagged += bool(wrong)
            slow += len(wrong) < len(state.findings)
            pending += state.verdict.status == "pending"
            if wrong:
                print(f"  false finding: {[(f.id, f.message) for f in wrong]}")
            time.sleep(next_delay(state, interval))
        return samples, flagged, pending, slow
    finally:
        if source is not None:
            source.close()
        stop(proc, log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--healthy-s", type=float, default=600.0, help="0: skip the healthy run")
    parser.add_argument("--only", default="", help="only the scenarios whose name holds these words")
    args = parser.parse_args()
    print(f"time to verdict, `ncclcheck watch --once` on a job stuck for {STUCK_FOR_S:.0f} s (defaults: --stall 10):")
    wrong = 0
    for s in (s for s in SCENARIOS if args.only in s.name):
        took, hand, found, right = time_to_verdict(s)
        wrong += not right
        print(
            f"  {s.name:<52} {took:5.1f} s  ({took / hand:4.0f}x py-spy dump by hand, {hand * 1e3:4.0f} ms)"
            f"  -> {found}{'' if right else '  WRONG'}"
        )
    if args.healthy_s <= 0:
        return 1 if wrong else 0
    samples, flagged, pending, slow = false_findings(args.healthy_s)
    print(
        f"uneven job with chatty threads, {args.healthy_s:.0f} s at the live pace: {samples} samples, "
        f"{flagged} with a finding of a hang (false), {pending} 'watching' (a wait not yet judged, never ✓), "
        f"{slow} naming rank 1 the slow rank (right)"
    )
    return 1 if wrong or flagged else 0


if __name__ == "__main__":
    sys.exit(main())
