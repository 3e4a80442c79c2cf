"""What a smoke run does, as pure data: ops, sizes, bus factors, expected values, drills."""

from __future__ import annotations

import re
from dataclasses import dataclass

OPS = (
    "broadcast",
    "reduce",
    "all_reduce",
    "gather",
    "all_gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "send_recv",
    "barrier",
)
DRILLS = ("hang", "crash", "kill", "mismatch")
DEFAULT_SIZES = "8:1M"
DEFAULT_ITERS = 5
DEFAULT_WARMUP = 1
DEFAULT_TIMEOUT_S = 30.0
ELEMENT_BYTES = 4  # float32
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class PlanError(ValueError):
    """A bad --sizes / --ops / --drill value; the message says what is wrong."""


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md)."""
    if world <= 1 or op == "barrier":
        return 0.0 if op == "barrier" else 1.0
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (world - 1) / world
    return 1.0


def parse_size(text: str) -> int:
    """``64M`` -> bytes; a size is whole float32 elements (a multiple of 4 bytes), at least one."""
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise PlanError(f"'{text}' is not a size (examples: 8, 4K, 64M)")
    size = int(match.group(1)) * UNITS[match.group(2)]
    if size < ELEMENT_BYTES or size % ELEMENT_BYTES:
        raise PlanError(f"--sizes: {text.strip()} is not a whole number of float32 elements (4 B each): give 4, 8, ...")
    return size


def parse_sizes(text: str, factor: int = 4) -> tuple[int, ...]:
    """``8:64M`` -> 8, 32, ..., and the max itself (x``factor`` steps, like nccl-tests -b/-e/-f); ``1K,1M`` a list."""
    if ":" in text:
        low_text, high_text = text.split(":", 1)
        low, high = parse_size(low_text), parse_size(high_text)
        if high < low:
            raise PlanError(f"--sizes {text}: need min <= max")
        sizes, size = [], low
        while size <= high:
            sizes.append(size)
            size *= factor
        if sizes[-1] != high:
            sizes.append(high)  # the size asked for is always measured
        return tuple(sizes)
    listed = tuple(parse_size(part) for part in text.split(",") if part.strip())
    if not listed:
        raise PlanError(f"--sizes {text!r}: no size given (examples: 8:1M, 4K,64M)")
    return listed


def parse_ops(text: str) -> tuple[str, ...]:
    ops = tuple(o.strip() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise PlanError(f"unknown op(s) {', '.join(bad) or '(none)'}; choose from {', '.join(OPS)}")
    return ops


@dataclass(frozen=True)
class Drill:
    """Make ``rank`` misbehave at ``op``: hang, crash (raise), kill (SIGKILL itself, as the OOM killer would), or call a different collective."""

    kind: str
    rank: int
    op: str


def parse_drill(text: str) -> Drill:
    """``hang@1:all_reduce`` -> a Drill; a bad part is named with the values it may take."""
    match = re.fullmatch(r"(\w+)@(\d+):(\w+)", text.strip())
    if not match:
        raise PlanError(f"--drill {text}: expected KIND@RANK:OP, e.g. hang@1:all_reduce")
    kind, rank, op = match.groups()
    if kind not in DRILLS:
        raise PlanError(f"--drill {text}: unknown kind {kind}; choose from {', '.join(DRILLS)}")
    if op not in OPS:
        raise PlanError(f"--drill {text}: unknown op {op}; choose from {', '.join(OPS)}")
    return Drill(kind, int(rank), op)


def check_drills(drills: tuple[Drill, ...], ops: tuple[str, ...], world_size: int) -> None:
    """A drill that could never fire is an error, not a silent pass."""
    for d in drills:
        if d.rank >= world_size:
            raise PlanError(f"--drill {d.kind}@{d.rank}:{d.op}: there is no rank {d.rank} (ranks 0..{world_size - 1})")
        if d.op not in ops:
            raise PlanError(f"--drill {d.kind}@{d.rank}:{d.op}: {d.op} is not in --ops ({','.join(ops)})")
    if any(d.kind == "mismatch" for d in drills) and world_size < 2:
        raise PlanError("--drill mismatch needs at least 2 ranks")


def elements(op: str, size: int, world: int) -> int:
    """float32 elements of the total buffer for ``size`` bytes, a multiple of the world size."""
    count = max(size // ELEMENT_BYTES, 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        count = max(count // world, 1) * world
    return count
