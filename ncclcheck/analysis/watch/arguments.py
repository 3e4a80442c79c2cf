"""A rank's collective arguments, read from the locals of its torch.distributed frame (``py-spy --locals``).

What py-spy shows (torch 2.x): the c10d function's own arguments (``src='1'``, ``group='None'``, ...) and, one
frame out, c10d_logger's wrapper with the call's ``args``/``kwargs`` as the user passed them. Most collectives
rebind ``group`` to the default group's object before they block, and a ProcessGroup's repr is only its
address (different in every process), so whether the group is the default one is read from what the user
passed: ``group=None`` or no group at all is the default group, a ProcessGroup object a sub-group (an explicit
``group=dist.group.WORLD`` reads as a sub-group: the reprs cannot tell them apart; where py-spy cut the repr
short, as with a list of tensors, the group is not known). Opaque reprs
(``<P2POp at 0x..>``, a Work handle) tell nothing: a rank in ``work.wait()`` of a batch_isend_irecv is told
by the handle its frame holds, but its peers cannot be read. A handle held by a frame that calls a blocking
send/recv (``req = dist.isend(x, right); dist.recv(y, left)``) is an op still in flight to an unknown peer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ncclcheck.analysis.stacks import C10D_FILES, COLLECTIVES, WORLD_CALLS
from ncclcheck.model.args import P2P, RECVS, SENDS, CallArgs, FrameLocals

WRAPPER_FILE = "c10d_logger.py"
WORK = "_distributed_c10d.Work at "  # the repr py-spy gives a c10d Work handle (or a list of them)
CUT = "..."  # py-spy shortens a long repr (about 120 characters): ``([<Tensor ..>, ...], ...)``, ``{...}``
_INT = re.compile(r"-?\d+")
_GROUP_KWARG = re.compile(r'"group":\s*(None|<[^>]*>)')


def parse(frames: Sequence[FrameLocals]) -> CallArgs | None:
    """The arguments of the outermost torch.distributed collective on the stack (innermost first), if any."""
    at = None
    for i, frame in enumerate(frames):
        if frame.filename.endswith(C10D_FILES) and (frame.function in COLLECTIVES or frame.function in WORLD_CALLS):
            at = i
    if at is None:
        return _handle(frames)
    if frames[at].function in WORLD_CALLS:
        return _world_call(frames, at)
    call = frames[at]
    outer = frames[at + 1] if at + 1 < len(frames) else None
    wrapper = outer if outer is not None and outer.filename.endswith(WRAPPER_FILE) else None
    numbers = {name: _int(call.get(name)) for name in ("src", "dst", "group_src", "group_dst", "tag")}
    group = _group(call, wrapper)
    pending = any(WORK in text for frame in frames[at + 1 :] for _, text in frame.values)
    return CallArgs(
        call.function,
        numbers["src"],
        numbers["dst"],
        numbers["group_src"],
        numbers["group_dst"],
        tag=numbers["tag"],
        group=group,
        p2p=_p2p(call.function, numbers, group, call.get("src") is not None, numbers["tag"]),
        pending=pending,
    )


def _world_call(frames: Sequence[FrameLocals], at: int) -> CallArgs:
    """Start-up or group creation, and whom it waits for: the ranks of the group it creates (``ranks``), and the
    world it waits to fill (``world_size``): init_process_group's own, or the count of a group's store-based barrier
    (``TORCH_DIST_INIT_BARRIER=1``: the whole world; with ``use_local_synchronization``, the members). A rank still in
    ``_new_process_group_helper`` waits only for the group's members to connect (``world_size`` None). The group's
    name comes from the innermost c10d frame that has one."""
    call = frames[at]
    inner = frames[:at]
    name = next((_text(f.get("group_name")) for f in inner if f.get("group_name") is not None), None)
    barrier = next((f for f in inner if f.function == "_store_based_barrier"), None)
    count = _int(barrier.get("rendezvous_count")) if barrier is not None else None
    return CallArgs(
        call.function,
        world_size=_int(call.get("world_size")) if call.function == "init_process_group" else count,
        ranks=_ranks(call.get("ranks")),
        group_name=name,
    )


def _text(value: str | None) -> str | None:
    """A string local's value (py-spy shows its repr in quotes)."""
    if value is None:
        return None
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _ranks(value: str | None) -> tuple[int, ...] | None:
    """``[0, 1]`` as py-spy shows a list of ints; None when it is not one (or cut short)."""
    if value is None or CUT in value or not (value.startswith("[") and value.endswith("]")):
        return None
    items = [x.strip() for x in value[1:-1].split(",") if x.strip()]
    return tuple(int(x) for x in items) if all(_INT.fullmatch(x) for x in items) else None


def _handle(frames: Sequence[FrameLocals]) -> CallArgs | None:
    """A main thread asleep in the user's frame that holds a c10d Work handle: in ``work.wait()`` (of an isend,
    an irecv or a batch_isend_irecv), the one call there that sleeps in C. Its peers are not in the stack."""
    if frames and any(WORK in text for _, text in frames[0].values):
        return CallArgs("wait")
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and _INT.fullmatch(text) else None


def _group(call: FrameLocals, wrapper: FrameLocals | None) -> str | None:
    """``default``, ``other`` or None (not known)."""
    if call.get("group") == "None":
        return "default"
    if call.get("group") is None or wrapper is None:
        return None
    kwargs, args = wrapper.get("kwargs") or "", wrapper.get("args") or ""
    passed = _GROUP_KWARG.search(kwargs)
    if passed:
        return "default" if passed.group(1) == "None" else "other"
    if "ProcessGroup" in args:
        return "other"
    return None if CUT in args or CUT in kwargs else "default"  # the group may be in what py-spy cut off


def _p2p(
    op: str, numbers: dict[str, int | None], group: str | None, read: bool, tag: int | None = None
) -> tuple[P2P, ...] | None:
    """The one op of a send or recv, its peer as a global rank; None when that cannot be told. ``read``: its ``src``
    local was there to read (py-spy may read none of a frame's locals)."""
    if op not in SENDS | RECVS:
        return None
    mine, theirs = ("dst", "group_dst") if op in SENDS else ("src", "group_src")
    kind = "send" if op in SENDS else "recv"
    if numbers[mine] is not None:
        return (P2P(kind, numbers[mine], tag),)
    if numbers[theirs] is not None:  # a rank in the group: the same as the global one only in the default group
        return (P2P(kind, numbers[theirs], tag),) if group == "default" else None
    return (P2P("recv", None, tag),) if kind == "recv" and read else None  # src='None': from any source
