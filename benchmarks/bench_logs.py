"""How fast and how lean is ``ncclcheck logs``? Against ``grep -E`` with the catalogue's patterns, same file, same run.

Generates three logs of ``--size-mb`` MiB each, then times ``ncclcheck logs --json`` and ``grep -E -c`` with
every literal ncclcheck looks for (rules, NCCL, torchrun's summary, exceptions), alternately, on each:
- ``job``: what a failed job's log looks like: 64 ranks' NCCL_DEBUG=INFO chatter and the failure
  (real lines from tests/fixtures/nccl_logs) around a bulk of training-step output (goal >= 0.5x of grep);
- ``dense``: the worst case, nothing but NCCL/torch lines: every fixture line (errors, tracebacks, torchrun's
  summary, nested launcher prefixes) and channel lines, repeated (goal >= 0.10x of grep);
- ``info``: a 1,024-rank job's NCCL_DEBUG=INFO output, one process per rank: the fixtures' real INFO lines
  under each rank's own host:pid header (no goal of its own: the common shape of a large job's NCCL log);
- ``corpus``: every real excerpt in tests/fixtures (the shared corpus: nccl_logs, nccl_logs_more, torchrun and
  the real failures made here) concatenated as they are, file after file, repeated to the size: no generator's
  shape, every emitter's (goal >= 0.10x of grep, as dense);
- ``real``: the real NCCL excerpts alone (tests/fixtures/nccl_logs, a copy of the shared ones) concatenated as they
  are and repeated to the size: dense real NCCL text, its errors, tracebacks and tables as NCCL and torch print them,
  no generator's lines (goal >= 0.10x of grep).
ncclcheck uses every core this process may use (``taskset -c 0 python ...`` measures one); grep uses one.
Reports the throughput ratios and the peak RSS of the largest process (goal <= 150 MiB).
Usage: python benchmarks/bench_logs.py [--size-mb 1024] [--kinds job,dense,info,corpus,real]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from _timing import wall  # benchmarks/ is on sys.path when run as a script

from ncclcheck.analysis.logs.diagnose import GATE

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "nccl_logs"


def ere(literal: str) -> str:
    """A literal as a POSIX extended regex (``WorkNCCL(`` unescaped makes grep fail at once)."""
    return "".join("\\" + c if c in ".[]()*+?{}|^$\\" else c for c in literal)


def fixture_lines() -> list[str]:
    """The real NCCL lines every generated log is built around; none is a broken checkout, said at once."""
    lines = [
        line for p in sorted(FIXTURES.glob("*.log")) for line in p.read_text(errors="replace").splitlines() if line
    ]
    if not lines:
        raise SystemExit(f"bench_logs: no NCCL log lines under {FIXTURES}: the fixtures are missing from this checkout")
    return lines


def generate_job(path: Path, size_mb: int) -> None:
    """NCCL init and failure lines from every fixture, with training-step output in between."""
    real = "".join(f"[rank{i % 64}]:{line}\n" for i, line in enumerate(fixture_lines()))
    target, written, step = size_mb << 20, len(real) * 2, 0
    with path.open("w", encoding="utf-8") as out:
        out.write(real)
        while written < target:
            block = "".join(
                f"[rank{r}]:step {step + k} | loss {2 + (step + k + r) % 97 / 100:.4f} | lr 3.00e-04 | "
                f"grad_norm 0.{(step * 7 + r) % 1000:03d} | tokens/s {50000 + r * 13} | mem 41.2GiB\n"
                for k in range(64)
                for r in range(64)
            )
            out.write(block)
            written += len(block)
            step += 64
        out.write(real)


def generate_dense(path: Path, size_mb: int) -> None:
    lines = fixture_lines()
    target, written, i = size_mb << 20, 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            block = []
            for line in lines:
                i += 1
                block.append(
                    f"[rank{i % 64}]:{line}\n"
                    if i % 3
                    else f"node{i % 8}:{1000 + i % 64}:{i % 97} [0] NCCL INFO Channel 00/0 : {i % 64}[0] -> {(i + 1) % 64}[0] via P2P/IPC\n"
                )
            chunk = "".join(block)
            out.write(chunk)
            written += len(chunk)


def generate_info(path: Path, size_mb: int) -> None:
    """Only NCCL INFO lines, as NCCL_DEBUG=INFO prints them: 1,024 processes on 128 hosts, each line one of the
    fixtures' real INFO messages under its own process's header."""
    messages = [m.group(1) for line in fixture_lines() if (m := re.search(r" NCCL INFO (.+)", line))]
    target, written, i = size_mb << 20, 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            block = []
            for _ in range(4096):
                rank = i % 1024
                block.append(
                    f"node{rank // 8:04d}:{20000 + rank}:{20100 + rank} [{rank % 8}] NCCL INFO "
                    f"{messages[i % len(messages)]}\n"
                )
                i += 1
            chunk = "".join(block)
            out.write(chunk)
            written += len(chunk)


def generate_corpus(path: Path, size_mb: int) -> None:
    """Every real excerpt under tests/fixtures, whole and in order, repeated until ``size_mb``."""
    _repeated(path, size_mb, FIXTURES.parent.rglob("*.log"))


def generate_real(path: Path, size_mb: int) -> None:
    """The real NCCL excerpts (tests/fixtures/nccl_logs), whole and in order, repeated until ``size_mb``."""
    _repeated(path, size_mb, FIXTURES.glob("*.log"))


def _repeated(path: Path, size_mb: int, found: Iterable[Path]) -> None:
    files = sorted(found)
    text = "".join(p.read_text(errors="replace").rstrip("\n") + "\n" for p in files)
    if not text.strip():
        raise SystemExit(f"bench_logs: no log excerpts under {FIXTURES.parent}: the fixtures are missing")
    target, written = size_mb << 20, 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            out.write(text)
            written += len(text)


def _children_cpu() -> float:
    """CPU seconds of the processes run so far (and of their own children, the workers, once they ended)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


GOALS = {"job": 0.5, "dense": 0.10, "corpus": 0.10, "real": 0.10}
KINDS = {
    "job": generate_job,
    "dense": generate_dense,
    "info": generate_info,
    "corpus": generate_corpus,
    "real": generate_real,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("-n", type=int, default=2)
    parser.add_argument("--kinds", default="job,dense,info,corpus,real")
    args = parser.parse_args()
    print(f"ncclcheck may use {len(os.sched_getaffinity(0))} cores")
    for kind in args.kinds.split(","):
        generate = KINDS[kind]
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / f"{kind}.log"
            generate(log, args.size_mb)
            size = log.stat().st_size / 2**20
            ours = [sys.executable, "-m", "ncclcheck", "logs", "--json", str(log)]
            grep = ["grep", "-E", "-c", *[x for t in GATE.literals for x in ("-e", ere(t))], str(log)]
            times: dict[str, list[float]] = {"ncclcheck": [], "grep": []}
            check = subprocess.run(ours, capture_output=True, text=True, check=False)
            findings = json.loads(check.stdout or "{}").get("findings") if check.returncode in (0, 1) else None
            if not findings:  # every generated log holds findings: none means the measurement is wrong
                raise SystemExit(
                    f"bench_logs: ncclcheck logs found nothing in the {kind} log (exit {check.returncode})"
                )
            cpu: dict[str, list[float]] = {"ncclcheck": [], "grep": []}
            for _ in range(args.n):
                for name, argv in (("ncclcheck", ours), ("grep", grep)):
                    before = _children_cpu()
                    times[name].append(wall(argv, ok=(0, 1)))
                    cpu[name].append(_children_cpu() - before)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{kind} log: {size:.0f} MiB; ncclcheck {size / med['ncclcheck']:.1f} MiB/s, grep -E {size / med['grep']:.1f} MiB/s"
        )
        goal = f" (goal >= {GOALS[kind]:.2f}x)" if kind in GOALS else ""
        pairs = sorted(g / n for n, g in zip(times["ncclcheck"], times["grep"], strict=True))  # each run's own
        print(
            f"  throughput ratio: {med['grep'] / med['ncclcheck']:.3f}x of grep{goal};"
            f" run by run {pairs[0]:.3f}-{pairs[-1]:.3f}x"
        )
        used = {k: statistics.median(v) for k, v in cpu.items()}  # less moved by other load than wall time
        print(
            f"  CPU time: ncclcheck {used['ncclcheck']:.2f} s (workers too), grep {used['grep']:.2f} s:"
            f" {used['grep'] / used['ncclcheck']:.3f}x"
        )
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest child process (ncclcheck or a worker of it): {peak_mib:.0f} MiB (goal <= 150 MiB)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
