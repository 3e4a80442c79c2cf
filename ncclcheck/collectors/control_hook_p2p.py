"""The rank side of ``ncclcheck run``'s point-to-point record: copied beside the hook (``sitecustomize.py``) as
``ncclcheck_hook_p2p.py`` and installed by it once ``torch.distributed.distributed_c10d`` is imported. Stdlib only.

It wraps c10d's ``send``, ``recv``, ``isend`` and ``irecv`` (``batch_isend_irecv`` and ``P2POp`` call them) and keeps
the last ``KEEP`` ops of the rank: the side, the peer as a global rank, the tag, the group, the line of the user's
code that posted it, and its request (a blocking call is pending until it returns; an async one until its request
completes). How many ops were posted to and from each peer is counted too. It also keeps the calls c10d returned from
at once because the rank is not a member of the group it passed (``_warn_not_in_group``): a collective on the wrong
group, which leaves the group's members waiting. ``answer()`` is the JSON the control plane handler ``ncclcheck_p2p``
returns: what each rank has in flight, which the stacks cannot show once a rank waits on a request
(``work.wait()``). The wrappers cost about 2 µs of Python an op (a small slotted record, the caller's code object
looked up in a cache; the words are made only when asked), and never raise into the job: a failure to record leaves
the op unrecorded.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

HANDLER = "ncclcheck_p2p"
KEEP = 64  # ops kept per rank (the newest)
CALLS = {"send": ("send", True), "recv": ("recv", True), "isend": ("send", False), "irecv": ("recv", False)}
# frames that are not the user's: torch's, and ours (this module as the hook's copy or in the package, the hook)
_SKIP = (
    os.sep + "torch" + os.sep,
    "ncclcheck_hook_p2p.py",
    "control_hook_p2p.py",
    "control_hook.py",
    os.sep + "hook" + os.sep + "sitecustomize.py",
)

_ops: deque[_Op] = deque(maxlen=KEEP)
_skipped: list[dict[str, Any]] = []  # calls on a group the rank is not a member of
_posted: dict[tuple[str, Any], int] = {}  # (side, peer): ops posted so far, per side and peer (None: any source)
_c10d: list[ModuleType] = []  # the module wrapped: group names are asked of it when the control plane asks
_seq = [0]
_lock = threading.Lock()
_inside = threading.local()  # recv() calls irecv(): only the outermost call is recorded


def install(module: ModuleType) -> None:
    """Wrap the point-to-point calls of c10d (and torch.distributed's copies, if bound already)."""
    _c10d[:] = [module]
    parent = sys.modules.get("torch.distributed")
    for name in CALLS:
        original = getattr(module, name, None)
        if original is None or getattr(original, "__ncclcheck__", False):
            continue
        wrapped = _wrap(module, name, original)
        setattr(module, name, wrapped)
        if parent is not None and getattr(parent, name, None) is original:
            setattr(parent, name, wrapped)
    warn = getattr(module, "_warn_not_in_group", None)
    if warn is not None and not getattr(warn, "__ncclcheck__", False):
        setattr(module, "_warn_not_in_group", _not_member(warn, module))  # noqa: B010 - a module attribute, by name
    register = getattr(sys.modules.get("torch._C._distributed_c10d"), "_register_handler", None)
    if register is not None:
        try:
            import ctypes  # the registry is a C++ static: the handler must outlive the interpreter (see the hook)

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(_handler))
            _keep.append(_handler)
            register(HANDLER, _handler)
        except Exception:  # registered already (a second install in this process): the first one answers
            pass


_keep: list[Any] = []


class _Op:
    """One op as recorded: kept small, turned into words only when the control plane asks."""

    __slots__ = ("blocking", "call", "code", "group", "line", "peer", "posted", "seq", "side", "state", "tag", "work")

    def __init__(self, side: str, call: str, peer: Any, tag: Any, group: Any, blocking: bool) -> None:
        self.side, self.call, self.peer, self.tag, self.group, self.blocking = side, call, peer, tag, group, blocking
        self.state, self.work, self.posted, self.seq = "pending", None, time.monotonic(), 0
        self.code, self.line = _caller()


def _wrap(module: ModuleType, name: str, original: Any) -> Any:
    import functools

    side, blocking = CALLS[name]
    key = "dst" if side == "send" else "src"
    group_key = f"group_{key}"

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "on", False):
            return original(*args, **kwargs)
        op = _entry(module, name, side, blocking, key, group_key, args, kwargs)
        _inside.on = True
        try:
            out = original(*args, **kwargs)
        except BaseException:
            if op is not None:
                op.state = "failed"
            raise
        finally:
            _inside.on = False
        if op is not None:
            if blocking:
                op.state = "completed"
            elif out is None:
                op.state = "not-member"  # c10d returns None to a rank outside the group: nothing was posted
            else:
                op.work = out
        return out

    wrapper.__ncclcheck__ = True  # type: ignore[attr-defined]
    return wrapper


def _not_member(original: Any, module: ModuleType) -> Any:
    """c10d's warning that a call's group does not hold this rank, recorded with the user's line and that group's
    ranks (from the calling c10d function's ``group`` local)."""

    def wrapper(op_name: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            group = sys._getframe(1).f_locals.get("group")
            try:
                ranks = list(module.get_process_group_ranks(group)) if group is not None else None
            except Exception:
                ranks = None
            with _lock:
                _seq[0] += 1
                _skipped.append({"call": str(op_name), "site": _site(), "seq": _seq[0], "ranks": ranks})
                del _skipped[:-KEEP]
        except Exception:
            pass
        return original(op_name, *args, **kwargs)

    wrapper.__ncclcheck__ = True  # type: ignore[attr-defined]
    return wrapper


def _entry(
    module: ModuleType,
    name: str,
    side: str,
    blocking: bool,
    key: str,
    group_key: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> _Op | None:
    try:
        n = len(args)
        peer = kwargs.get(key, args[1] if n > 1 else None)
        group = kwargs.get("group", args[2] if n > 2 else None)
        tag = kwargs.get("tag", args[3] if n > 3 else 0)
        if peer is None:
            group_peer = kwargs.get(group_key, args[4] if n > 4 else None)
            if group_peer is not None:
                peer = module.get_global_rank(group if group is not None else module._get_default_group(), group_peer)
        op = _Op(side, name, peer, tag, group, blocking)
        count = (side, peer)
        with _lock:
            _seq[0] += 1
            op.seq = _seq[0]
            _posted[count] = _posted.get(count, 0) + 1
            _ops.append(op)
        return op
    except Exception:  # never into the job
        return None


def _group_name(module: ModuleType | None, group: Any) -> str:
    if group is None:
        return "0"  # the default group's name
    try:
        return str(module._get_process_group_name(group)) if module is not None else "?"
    except Exception:
        return "?"


_users: dict[Any, bool] = {}  # code object -> whether it is the user's (not torch's, not ours)


def _caller() -> tuple[Any, int]:
    """The code object and line of the innermost frame of the user's code that led here (one dict lookup a frame)."""
    frame = sys._getframe(3)
    while frame is not None:
        code = frame.f_code
        mine = _users.get(code)
        if mine is None:
            filename = code.co_filename
            mine = _users[code] = not filename.startswith("<") and not any(part in filename for part in _SKIP)
        if mine:
            return code, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None, 0


def _site() -> str | None:
    """``file:line`` of the innermost frame of the user's code that led here."""
    code, line = _caller()
    return f"{code.co_filename}:{line}" if code is not None else None


def answer() -> dict[str, Any]:
    """What this rank has posted: its last ops with their state now, and the counts per side and peer."""
    with _lock:
        ops, posted, skipped = list(_ops), dict(_posted), list(_skipped)
    module = _c10d[0] if _c10d else None
    out = []
    for op in ops:
        state = op.state
        if state == "pending" and op.work is not None:
            try:
                state = "completed" if op.work.is_completed() else "pending"
            except Exception:
                state = "unknown"
        out.append(
            {
                "op": op.side,
                "call": op.call,
                "peer": op.peer,
                "tag": op.tag,
                "group": _group_name(module, op.group),
                "site": f"{op.code.co_filename}:{op.line}" if op.code is not None else None,
                "state": state,
                "seq": op.seq,
            }
        )
    rank = os.environ.get("RANK")
    return {
        "rank": int(rank) if rank and rank.isdigit() else None,
        "ops": out,
        "posted": {f"{side}:{'any' if peer is None else peer}": n for (side, peer), n in posted.items()},
        "skipped": skipped,
        "age_s": {str(op.seq): round(time.monotonic() - op.posted, 1) for op in ops},
    }


_answering = [0]  # answers in progress: the hook waits for them at exit (``control_hook._closing``)


def _handler(request: Any, response: Any) -> None:
    import json

    _answering[0] += 1
    try:
        response.set_content(json.dumps(answer()).encode(), "application/json")
        response.set_status(200)
    finally:
        _answering[0] -= 1
