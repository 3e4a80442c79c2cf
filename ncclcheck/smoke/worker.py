"""One rank of the smoke test: every collective over a size sweep, verified and timed.

Runs inside torch's elastic launcher (RANK, WORLD_SIZE, MASTER_ADDR... set). Every step is written
as a JSON line to ``<log-dir>/progress/rank<R>.jsonl`` before and after it, so the launcher's
watchdog sees where each rank is without talking to it; rank 0 also writes the job-wide result of
each (op, size), gathered from every rank over a CPU (gloo) group.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import mmap
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import torch
import torch.distributed as dist

from ncclcheck.analysis.smoke.plan import Drill, elements
from ncclcheck.analysis.smoke.progress import op_result
from ncclcheck.smoke import fingerprint as fingerprints


@dataclass(frozen=True)
class RankPlan:
    """What this rank runs."""

    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    backend: str
    drills: tuple[Drill, ...]
    log_dir: str


class Progress:
    """JSON-lines log of this rank's steps, plus a heartbeat the watchdog reads between them.

    The heartbeat is the time of the last finished iteration, stored into a shared memory map: no
    system call in the timed loop, and a step of many iterations is not mistaken for a stuck one.
    """

    def __init__(self, log_dir: str, rank: int) -> None:
        directory = os.path.join(log_dir, "progress")
        os.makedirs(directory, exist_ok=True)
        self._file: TextIO = open(os.path.join(directory, f"rank{rank}.jsonl"), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
        with open(os.path.join(directory, f"rank{rank}.beat"), "wb+") as beat:
            beat.write(bytes(8))
            beat.flush()
            self._beat = mmap.mmap(beat.fileno(), 8)

    def event(self, ev: str, **fields: Any) -> None:
        self._file.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
        self._file.flush()

    def beat(self) -> None:
        struct.pack_into("<d", self._beat, 0, time.time())


def _pattern(count: int, value: float, device: torch.device) -> torch.Tensor:
    """``value + (index % 7)``: exact in float32, and a misplaced chunk shows up as wrong."""
    return torch.arange(count, device=device, dtype=torch.float32).remainder_(7).add_(value)


NOT_IDEMPOTENT = ("all_reduce", "reduce")  # in place: a second run sums the sums
Step = tuple[Callable[[], object], Callable[[], int]]


class Collective:
    """Builds the buffers of one op at one size; the step's ``run`` is only the collective, ``check`` counts wrong.

    Buffers are built before ``run`` so that the timed region holds the collective alone, as in nccl-tests.
    """

    def __init__(self, op: str, count: int, rank: int, world: int, device: torch.device) -> None:
        self.op, self.count, self.rank, self.world, self.device = op, count, rank, world, device
        self.chunk = max(count // world, 1)

    def prepare(self, call: str | None = None) -> Step:
        """Fresh buffers for the op (or ``call`` instead, for the mismatch drill)."""
        return getattr(self, f"_{call or self.op}")()  # type: ignore[no-any-return]

    def _wrong(self, got: torch.Tensor, expected: torch.Tensor) -> int:
        return int((got != expected).sum().item())

    def _broadcast(self) -> Step:
        buf = _pattern(self.count, 1.0, self.device) if self.rank == 0 else torch.zeros(self.count, device=self.device)
        return lambda: dist.broadcast(buf, src=0), lambda: self._wrong(buf, _pattern(self.count, 1.0, self.device))

    def _sum_expected(self, count: int, extra: float = 0.0) -> torch.Tensor:
        w = self.world
        return _pattern(count, 0.0, self.device).mul_(w).add_(w * (w + 1) / 2 + extra)

    def _reduce(self) -> Step:
        buf = _pattern(self.count, self.rank + 1.0, self.device)
        return lambda: dist.reduce(
            buf, dst=0
        ), lambda: self._wrong(buf, self._sum_expected(self.count)) if self.rank == 0 else 0

    def _all_reduce(self) -> Step:
        buf = _pattern(self.count, self.rank + 1.0, self.device)
        return lambda: dist.all_reduce(buf), lambda: self._wrong(buf, self._sum_expected(self.count))

    def _chunks(self) -> list[torch.Tensor]:
        return [torch.zeros(self.chunk, device=self.device) for _ in range(self.world)]

    def _check_chunks(self, chunks: list[torch.Tensor]) -> int:
        return sum(self._wrong(c, _pattern(self.chunk, j + 1.0, self.device)) for j, c in enumerate(chunks))

    def _gather(self) -> Step:
        out = self._chunks() if self.rank == 0 else None
        mine = _pattern(self.chunk, self.rank + 1.0, self.device)
        return lambda: dist.gather(mine, out, dst=0), lambda: self._check_chunks(out) if out is not None else 0

    def _all_gather(self) -> Step:
        out, mine = self._chunks(), _pattern(self.chunk, self.rank + 1.0, self.device)
        return lambda: dist.all_gather(out, mine), lambda: self._check_chunks(out)

    def _scatter(self) -> Step:
        out = torch.zeros(self.chunk, device=self.device)
        chunks = [_pattern(self.chunk, j + 1.0, self.device) for j in range(self.world)] if self.rank == 0 else None
        return lambda: dist.scatter(out, chunks, src=0), lambda: self._wrong(
            out, _pattern(self.chunk, self.rank + 1.0, self.device)
        )

    def _reduce_scatter(self) -> Step:
        out = torch.zeros(self.chunk, device=self.device)
        parts = [_pattern(self.chunk, self.rank + 1.0 + j, self.device) for j in range(self.world)]
        return lambda: dist.reduce_scatter(out, parts), lambda: self._wrong(
            out, self._sum_expected(self.chunk, extra=self.world * self.rank)
        )

    def _all_to_all(self) -> Step:
        send = torch.cat([_pattern(self.chunk, 100.0 * self.rank + j, self.device) for j in range(self.world)])
        recv = torch.zeros_like(send)
        want = torch.cat([_pattern(self.chunk, 100.0 * j + self.rank, self.device) for j in range(self.world)])
        return lambda: dist.all_to_all_single(recv, send), lambda: self._wrong(recv, want)

    def _send_recv(self) -> Step:
        right, left = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        send = _pattern(self.count, self.rank + 1.0, self.device)
        recv = torch.zeros(self.count, device=self.device)

        def ring() -> None:
            if self.world == 1:
                recv.copy_(send)
                return
            for req in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
            ):
                req.wait()

        return ring, lambda: self._wrong(recv, _pattern(self.count, left + 1.0, self.device))

    def _barrier(self) -> Step:
        return lambda: dist.barrier(), lambda: 0


def drill_hang(progress: Progress, op: str) -> None:
    """The hang drill: this rank never enters ``op``."""
    progress.event("drill", kind="hang", op=op)
    while True:
        time.sleep(1)


def _mismatch_call(op: str) -> str:
    return "all_gather" if op == "all_reduce" else "all_reduce"


class Timer:
    """Wall time of one collective call; CUDA events on GPU so the time is the device's."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def measure(self, run: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) * 1000.0
        begin = time.perf_counter()
        run()
        return (time.perf_counter() - begin) * 1e6


def run_rank(plan: RankPlan) -> int:
    """Run the plan as this rank; returns the process exit code."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    progress = Progress(plan.log_dir, rank)
    device = torch.device(f"cuda:{local_rank}") if plan.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    fingerprint = dataclasses.asdict(fingerprints.collect(rank, plan.backend, torch.__version__, _nccl_version()))
    progress.event(
        "hello",
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        pid=os.getpid(),
        host=socket.gethostname(),
        fingerprint=fingerprint,
    )
    progress.event("start", op="init", bytes=0)
    # device_id (eager NCCL init, torch >= 2.3) binds the communicator to this GPU; older torch lacks it.
    eager = device.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters
    init_kwargs: dict[str, Any] = {"device_id": device} if eager else {}
    dist.init_process_group(plan.backend, **init_kwargs)
    cpu_group = dist.new_group(backend="gloo") if plan.backend != "gloo" else None
    everyone = _gather_json(fingerprint, rank, world, cpu_group)
    if everyone is not None:
        progress.event("fingerprints", fingerprints=everyone)
    progress.event("done", op="init", bytes=0)
    timer = Timer(device)
    try:
        for op in plan.ops:
            for size in plan.sizes if op != "barrier" else plan.sizes[:1]:
                _run_step(plan, op, size, rank, world, device, progress, timer, cpu_group)
    except Exception as exc:
        # Timed to the microsecond: the rank that failed first is the cause, the others' errors echo it.
        progress.event("error", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise
    progress.event("end")
    dist.destroy_process_group()
    return 0


def _run_step(
    plan: RankPlan,
    op: str,
    size: int,
    rank: int,
    world: int,
    device: torch.device,
    progress: Progress,
    timer: Timer,
    cpu_group: Any,
) -> None:
    count = elements(op, size, world)
    nbytes = 0 if op == "barrier" else count * 4
    drill = next((d for d in plan.drills if d.rank == rank and d.op == op), None)
    if drill and drill.kind == "hang":
        drill_hang(progress, op)
    if drill and drill.kind == "crash":
        progress.event("drill", kind="crash", op=op)
        raise RuntimeError(f"ncclcheck drill: rank {rank} crashed at {op}")
    if drill and drill.kind == "kill":
        progress.event("drill", kind="kill", op=op)
        os.kill(os.getpid(), signal.SIGKILL)
    collective = Collective(op, count, rank, world, device)
    call = _mismatch_call(op) if drill and drill.kind == "mismatch" else None
    progress.event("start", op=op, bytes=nbytes, call=call or op)
    times, wrong = _verified_times(collective, call, plan, timer, progress)
    progress.event("done", op=op, bytes=nbytes, count=count, times_us=times, wrong=wrong)
    _gather_result(op, nbytes, count, times, wrong, rank, world, progress, cpu_group)


def _verified_times(
    collective: Collective, call: str | None, plan: RankPlan, timer: Timer, progress: Progress
) -> tuple[list[float], int]:
    """Like nccl-tests: one verified run on fresh buffers, warm-up runs, then timed runs back to back.

    Nothing runs between timed iterations (no checking, no allocation), so a rank's time is the
    collective's, not its peers' bookkeeping. Ops whose repeated result is unchanged are verified
    again after the timed runs, under load.
    """
    run, check = collective.prepare(call)
    run()
    wrong = check()
    run, check = collective.prepare(call)
    for _ in range(plan.warmup):
        run()
    times = []
    for _ in range(plan.iters):
        times.append(timer.measure(run))
        progress.beat()
    if collective.op not in NOT_IDEMPOTENT:
        wrong = max(wrong, check())
    return times, wrong


def _gather_result(
    op: str,
    nbytes: int,
    count: int,
    times: list[float],
    wrong: int,
    rank: int,
    world: int,
    progress: Progress,
    cpu_group: Any,
) -> None:
    """Rank 0 records the job-wide result: per-iteration max over ranks, wrong elements summed."""
    mine = torch.tensor([*times, float(wrong)], dtype=torch.float64)
    gathered = [torch.zeros_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, gathered, dst=0, group=cpu_group)
    if gathered is None:
        return
    rows = [t.tolist() for t in gathered]
    per_iter = [max(row[i] for row in rows) for i in range(len(times))]
    result = op_result(op, nbytes, count, per_iter, int(sum(row[-1] for row in rows)), world)
    progress.event("result", **dataclasses.asdict(result))


def _nccl_version() -> tuple[int, int, int] | None:
    if not torch.cuda.is_available():
        return None
    try:
        major, minor, patch = torch.cuda.nccl.version()[:3]
    except Exception:  # torch built without NCCL
        return None
    return int(major), int(minor), int(patch)


def _gather_json(obj: Any, rank: int, world: int, group: Any) -> list[Any] | None:
    """Every rank's JSON-able ``obj`` on rank 0 (None elsewhere), over tensors: gather_object needs numpy."""
    data = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.int64)
    dist.all_reduce(size, op=dist.ReduceOp.MAX, group=group)
    padded = torch.zeros(int(size.item()), dtype=torch.uint8)
    padded[: data.numel()] = data
    out = [torch.zeros_like(padded) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, out, dst=0, group=group)
    if out is None:
        return None
    return [json.loads(bytes(t.tolist()).rstrip(b"\0").decode()) for t in out]
