"""One rank of the smoke test: every collective over a size sweep, verified and timed.

Runs inside torch's elastic launcher (RANK, WORLD_SIZE, MASTER_ADDR... set). Every step is written
as a JSON line to ``<log-dir>/progress/rank<R>.jsonl`` before and after it, so the launcher's
watchdog sees where each rank is without talking to it; rank 0 also writes the job-wide result of
each (op, size), gathered from every rank over a CPU (gloo) group.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import torch
import torch.distributed as dist

from ncclcheck.smoke.plan import Drill, bus_factor, elements


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
    """Append-only JSON-lines log of this rank's steps, flushed line by line."""

    def __init__(self, log_dir: str, rank: int) -> None:
        directory = os.path.join(log_dir, "progress")
        os.makedirs(directory, exist_ok=True)
        self._file: TextIO = open(os.path.join(directory, f"rank{rank}.jsonl"), "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def event(self, ev: str, **fields: Any) -> None:
        self._file.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
        self._file.flush()


def _pattern(count: int, value: float, device: torch.device) -> torch.Tensor:
    """``value + (index % 7)``: exact in float32, and a misplaced chunk shows up as wrong."""
    return torch.arange(count, device=device, dtype=torch.float32).remainder_(7).add_(value)


class Collective:
    """Builds the buffers of one op at one size, runs it, and counts wrong elements."""

    def __init__(self, op: str, count: int, rank: int, world: int, device: torch.device) -> None:
        self.op, self.count, self.rank, self.world, self.device = op, count, rank, world, device
        self.chunk = max(count // world, 1)

    def run(self, call: str | None = None) -> Callable[[], int]:
        """Run the op (or ``call`` instead, for the mismatch drill); returns a checker of the result."""
        return getattr(self, f"_{call or self.op}")()  # type: ignore[no-any-return]

    def _wrong(self, got: torch.Tensor, expected: torch.Tensor) -> int:
        return int((got != expected).sum().item())

    def _broadcast(self) -> Callable[[], int]:
        buf = _pattern(self.count, 1.0, self.device) if self.rank == 0 else torch.zeros(self.count, device=self.device)
        dist.broadcast(buf, src=0)
        return lambda: self._wrong(buf, _pattern(self.count, 1.0, self.device))

    def _sum_expected(self, count: int, extra: float = 0.0) -> torch.Tensor:
        w = self.world
        return _pattern(count, 0.0, self.device).mul_(w).add_(w * (w + 1) / 2 + extra)

    def _reduce(self) -> Callable[[], int]:
        buf = _pattern(self.count, self.rank + 1.0, self.device)
        dist.reduce(buf, dst=0)
        return lambda: self._wrong(buf, self._sum_expected(self.count)) if self.rank == 0 else 0

    def _all_reduce(self) -> Callable[[], int]:
        buf = _pattern(self.count, self.rank + 1.0, self.device)
        dist.all_reduce(buf)
        return lambda: self._wrong(buf, self._sum_expected(self.count))

    def _chunks(self) -> list[torch.Tensor]:
        return [torch.zeros(self.chunk, device=self.device) for _ in range(self.world)]

    def _check_chunks(self, chunks: list[torch.Tensor]) -> int:
        return sum(self._wrong(c, _pattern(self.chunk, j + 1.0, self.device)) for j, c in enumerate(chunks))

    def _gather(self) -> Callable[[], int]:
        out = self._chunks() if self.rank == 0 else None
        dist.gather(_pattern(self.chunk, self.rank + 1.0, self.device), out, dst=0)
        return lambda: self._check_chunks(out) if out is not None else 0

    def _all_gather(self) -> Callable[[], int]:
        out = self._chunks()
        dist.all_gather(out, _pattern(self.chunk, self.rank + 1.0, self.device))
        return lambda: self._check_chunks(out)

    def _scatter(self) -> Callable[[], int]:
        out = torch.zeros(self.chunk, device=self.device)
        chunks = [_pattern(self.chunk, j + 1.0, self.device) for j in range(self.world)] if self.rank == 0 else None
        dist.scatter(out, chunks, src=0)
        return lambda: self._wrong(out, _pattern(self.chunk, self.rank + 1.0, self.device))

    def _reduce_scatter(self) -> Callable[[], int]:
        out = torch.zeros(self.chunk, device=self.device)
        dist.reduce_scatter(out, [_pattern(self.chunk, self.rank + 1.0 + j, self.device) for j in range(self.world)])
        return lambda: self._wrong(out, self._sum_expected(self.chunk, extra=self.world * self.rank))

    def _all_to_all(self) -> Callable[[], int]:
        send = torch.cat([_pattern(self.chunk, 100.0 * self.rank + j, self.device) for j in range(self.world)])
        recv = torch.zeros_like(send)
        dist.all_to_all_single(recv, send)
        want = torch.cat([_pattern(self.chunk, 100.0 * j + self.rank, self.device) for j in range(self.world)])
        return lambda: self._wrong(recv, want)

    def _send_recv(self) -> Callable[[], int]:
        right, left = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        send = _pattern(self.count, self.rank + 1.0, self.device)
        recv = torch.zeros(self.count, device=self.device)
        if self.world > 1:
            for req in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
            ):
                req.wait()
        else:
            recv.copy_(send)
        return lambda: self._wrong(recv, _pattern(self.count, left + 1.0, self.device))

    def _barrier(self) -> Callable[[], int]:
        dist.barrier()
        return lambda: 0


def drill_hang(progress: Progress, op: str) -> None:
    """The hang drill: this rank never enters ``op``."""
    progress.event("drill", kind="hang", op=op)
    while True:
        time.sleep(1)


def _mismatch_call(op: str) -> str:
    return "all_gather" if op == "all_reduce" else "all_reduce"


class Timer:
    """Wall time of one op; CUDA events on GPU so the time is the device's."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def measure(self, run: Callable[[], Callable[[], int]]) -> tuple[float, Callable[[], int]]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            check = run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0, check
        begin = time.perf_counter()
        check = run()
        return (time.perf_counter() - begin) * 1e6, check


def run_rank(plan: RankPlan) -> int:
    """Run the plan as this rank; returns the process exit code."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    progress = Progress(plan.log_dir, rank)
    device = torch.device(f"cuda:{local_rank}") if plan.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    progress.event(
        "hello",
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        pid=os.getpid(),
        host=socket.gethostname(),
        backend=plan.backend,
        torch=torch.__version__,
        **_fingerprint(),
    )
    progress.event("start", op="init", bytes=0)
    init_kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(plan.backend, **init_kwargs)
    cpu_group = dist.new_group(backend="gloo") if plan.backend != "gloo" else None
    progress.event("done", op="init", bytes=0)
    timer = Timer(device)
    for op in plan.ops:
        for size in plan.sizes if op != "barrier" else plan.sizes[:1]:
            _run_step(plan, op, size, rank, world, device, progress, timer, cpu_group)
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
    collective = Collective(op, count, rank, world, device)
    call = _mismatch_call(op) if drill and drill.kind == "mismatch" else None
    progress.event("start", op=op, bytes=nbytes, call=call or op)
    times, wrong = [], 0
    for i in range(plan.warmup + plan.iters):
        elapsed, check = timer.measure(lambda: collective.run(call))
        if i >= plan.warmup:
            times.append(elapsed)
            wrong = max(wrong, check())
    progress.event("done", op=op, bytes=nbytes, times_us=times, wrong=wrong)
    _gather_result(op, nbytes, count, times, wrong, rank, world, progress, cpu_group)


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
    p50 = statistics.median(per_iter)
    p95 = sorted(per_iter)[min(len(per_iter) - 1, round(0.95 * (len(per_iter) - 1)))]
    algbw = nbytes / p50 / 1e3 if p50 > 0 else 0.0
    progress.event(
        "result",
        op=op,
        bytes=nbytes,
        count=count,
        time_us_p50=p50,
        time_us_p95=p95,
        algbw_gbps=algbw,
        busbw_gbps=algbw * bus_factor(op, world),
        wrong=int(sum(row[-1] for row in rows)),
    )


def _fingerprint() -> dict[str, Any]:
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # torch without NCCL
            nccl = None
    keys = (
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_NET",
        "GLOO_SOCKET_IFNAME",
        "NCCL_IB_GID_INDEX",
    )
    return {"nccl": nccl, "env": {k: os.environ[k] for k in keys if k in os.environ}}
