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

from ncclcheck.analysis.stacks import C10D_FILES, COLLECTIVES
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
        if frame.filename.endswith(C10D_FILES) and frame.function in COLLECTIVES:
            at = i
    if at is None:
        return _handle(frames)
    call = frames[at]
    outer = frames[at + 1] if at + 1 < len(frames) else None
    wrapper = outer if outer is not None and outer.filename.endswith(WRAPPER_FILE) else None
    numbers = {name: _int(call.get(name)) for name in ("src", "dst", "group_src", "group_dst", "tag")}
    group = _group(call, wrapper)
    pending = any(WORK in text for frame in frames[at + 1 :] for _, text in frame.values)
    return CallArgs(
        call.function,
        **numbers,
        group=group,
        p2p=_p2p(call.function, numbers, group, call.get("src") is not None),
        pending=pending,
    )


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


def _p2p(op: str, numbers: dict[str, int | None], group: str | None, read: bool) -> tuple[P2P, ...] | None:
    """The one op of a send or recv, its peer as a global rank; None when that cannot be told. ``read``: its ``src``
    local was there to read (py-spy may read none of a frame's locals)."""
    if op not in SENDS | RECVS:
        return None
    mine, theirs = ("dst", "group_dst") if op in SENDS else ("src", "group_src")
    kind = "send" if op in SENDS else "recv"
    if numbers[mine] is not None:
        return (P2P(kind, numbers[mine]),)
    if numbers[theirs] is not None:  # a rank in the group: the same as the global one only in the default group
        return (P2P(kind, numbers[theirs]),) if group == "default" else None
    return (P2P("recv", None),) if kind == "recv" and read else None  # src='None': from any source
