"""Read a Python stack like a distributed-systems engineer: which collective, called from where."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ncclcheck.model.args import RECVS, SENDS
from ncclcheck.model.stacks import Frame, mine

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
# Calls every rank of the world must make, in the same order, before any may go on: start-up and group creation. A
# rank inside one waits for the ranks of the world not yet in it (their store keys, their connections).
WORLD_CALLS = (
    "init_process_group",
    "new_group",
    "new_subgroups",
    "new_subgroups_by_enumeration",
    "split_group",
    "init_device_mesh",
)
C10D_FILES = ("distributed_c10d.py", "_functional_collectives.py", "device_mesh.py")
P2P = SENDS | RECVS | {"batch_isend_irecv"}
DATALOADER = "torch/utils/data/dataloader.py"
LOADER_WAITS = frozenset({"_next_data", "_get_data", "_try_get_data"})
# torch's Python calls that make the host wait for the GPU (torch/cuda: torch.cuda.synchronize, Event/Stream waits)
SYNC_CALLS = ("synchronize", "item", "cpu", "tolist", "wait_stream", "wait_event")
CUDA_SYNC = "cuda-sync"  # where watch says a rank waits when its host waits for the GPU's queue
# the C calls under ``.item()``, ``.cpu()``, a blocking copy or a synchronize, as ``py-spy dump --native`` shows them
NATIVE_SYNC = re.compile(
    r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy(?!Async)\w*|cuStreamSynchronize"
    r"|cuCtxSynchronize|cuEventSynchronize|cuMemcpyDtoH(?!Async)\w*|memcpy_and_sync|_local_scalar_dense"
)
AUTOGRAD = ("torch/autograd/__init__.py", "torch/autograd/graph.py")


def collective(frames: Sequence[Frame]) -> str | None:
    """The outermost torch.distributed collective on the stack (innermost first), if any; start-up and group creation
    (``WORLD_CALLS``) are collectives of the whole world.

    Only c10d's own API files count: other torch.distributed code names its own functions after
    collectives (DCP's ``_DistWrapper.all_reduce`` writes a checkpoint inside one). With ``--native``, a
    thread parked in ``c10d::...Work::wait`` (a ``work.wait()`` on an async handle) is in a collective too.
    """
    found = None
    for frame in frames:
        if frame.filename.endswith(C10D_FILES) and (frame.function in COLLECTIVES or frame.function in WORLD_CALLS):
            found = frame.function
    if found is None and any(f.native and "c10d::" in f.function and "::wait" in f.function for f in frames):
        return "wait"
    return found


def cuda_sync(frames: Sequence[Frame]) -> str | None:
    """The call by which a thread waits for the GPU's queue, where its frames show one: with NCCL, collectives are
    queued on the GPU, so a rank whose collective has not completed waits here, outside any collective call."""
    for frame in frames:
        if frame.native and (found := NATIVE_SYNC.search(frame.function)):
            return found.group(0)
        if not frame.native and "torch/cuda/" in frame.filename and frame.function.endswith(SYNC_CALLS):
            return frame.function.rsplit(".", 1)[-1]
    return None


def in_backward(frames: Sequence[Frame]) -> bool:
    """Whether a thread waits on the autograd engine: its innermost Python frame is torch's ``backward`` (the
    engine's threads run the gradient hooks, and with them DDP's, FSDP's and ZeRO's collectives)."""
    inner = next((f for f in frames if not f.native), None)
    return inner is not None and inner.filename.endswith(AUTOGRAD)


def loader_wait(frames: Sequence[Frame]) -> bool:
    """Whether a thread waits on its DataLoader's workers for the next batch."""
    return any(f.filename.endswith(DATALOADER) and f.function.rsplit(".", 1)[-1] in LOADER_WAITS for f in frames)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code: not torch, not the standard library, not a C frame.

    A rank blocked in ``queue.get`` is in ``Condition.wait`` (threading.py) under ``Queue.get`` (queue.py) under
    the user's ``next_batch``: the place to show is ``next_batch``, the frames below stay in the stack view."""
    return next((frame for frame in frames if mine(frame)), None)


def call_path(frames: Sequence[Frame]) -> tuple[str, ...]:
    """``file:line`` of each frame of the user's own code, innermost first: the whole call, of which the call site
    is the innermost line (a helper called from two places has one call site and two call paths)."""
    return tuple(f"{f.filename}:{f.line}" for f in frames if mine(f))


def call_site(frames: Sequence[Frame]) -> str | None:
    """``file:line (function)`` of the user's innermost frame (function and line from that one frame)."""
    frame = user_frame(frames)
    return f"{frame.filename}:{frame.line} ({frame.function})" if frame else None


def render(frames: Sequence[Frame]) -> tuple[str, ...]:
    return tuple(f"{f.function} ({f.filename}:{f.line})" for f in frames)
