"""Read a Python stack like a distributed-systems engineer: which collective, called from where."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.model.smoke import Frame

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "monitored_barrier",
    "wait",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "all_gather_object",
)
LIBRARY_PARTS = ("/torch/", "/threading.py", "<frozen runpy>", "/runpy.py")


def collective(frames: Sequence[Frame]) -> str | None:
    """The outermost torch.distributed collective on the stack (innermost first), if any."""
    found = None
    for frame in frames:
        if "torch/distributed" in frame.filename and frame.function in COLLECTIVES:
            found = frame.function
    return found


def call_site(frames: Sequence[Frame]) -> str | None:
    """``file:line (function)`` of the innermost frame outside torch and the standard library runners."""
    for frame in frames:
        if not frame.native and not any(part in frame.filename for part in LIBRARY_PARTS):
            return f"{frame.filename}:{frame.line} ({frame.function})"
    return None


def render(frames: Sequence[Frame]) -> tuple[str, ...]:
    return tuple(f"{f.function} ({f.filename}:{f.line})" for f in frames)
