"""The rank side of ``ncclcheck run``'s point-to-point record: copied beside the hook (``sitecustomize.py``) as
``ncclcheck_hook_p2p.py`` and installed by it once ``torch.distributed.distributed_c10d`` is imported. Stdlib only.

It wraps c10d's ``send``, ``recv``, ``isend`` and ``irecv`` (``batch_isend_irecv`` and ``P2POp`` call them) and keeps
the last ``KEEP`` ops of the rank: the side, the peer as a global rank, the tag, the group, the line of the user's
code that posted it, and its request (a blocking call is pending until it returns; an async one until its request
completes). How many ops were posted to and from each peer is counted too. It also keeps the calls c10d returned from
at once because the rank is not a member of the group it passed (``_warn_not_in_group``): a collective on the wrong
group, which leaves the group's members waiting. ``answer()`` is the JSON the control plane handler ``ncclcheck_p2p``
returns: what each rank has in flight, which the stacks cannot show once a rank waits on a request
(``work.wait()``). The wrappers cost a function call and a dict (about a microsecond an op), and never raise into the
job: a failure to record leaves the op unrecorded.
"""

from __future__ import annotations

import os
import sys
import threading
import time

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

_ops: list[dict[str, Any]] = []
_skipped: list[dict[str, Any]] = []  # calls on a group the rank is not a member of
_posted: dict[str, int] = {}  # "send:1", "recv:0", "recv:any": ops posted so far, per side and peer
_seq = [0]
_lock = threading.Lock()
_inside = threading.local()  # recv() calls irecv(): only the outermost call is recorded


def install(module: ModuleType) -> None:
    """Wrap the point-to-point calls of c10d (and torch.distributed's copies, if bound already)."""
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


def _wrap(module: ModuleType, name: str, original: Any) -> Any:
    import functools

    side, blocking = CALLS[name]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "on", False):
            return original(*args, **kwargs)
        entry = _entry(module, name, side, blocking, args, kwargs)
        _inside.on = True
        try:
            out = original(*args, **kwargs)
        except BaseException:
            if entry is not None:
                entry["state"] = "failed"
            raise
        finally:
            _inside.on = False
        if entry is not None:
            if blocking:
                entry["state"] = "completed"
            elif out is None:
                entry["state"] = "not-member"  # c10d returns None to a rank outside the group: nothing was posted
            else:
                entry["work"] = out
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
    module: ModuleType, name: str, side: str, blocking: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    try:
        given = dict(zip(("tensor", "peer", "group", "tag", "group_peer"), args))
        key = "dst" if side == "send" else "src"
        peer = kwargs.get(key, given.get("peer"))
        group = kwargs.get("group", given.get("group"))
        group_peer = kwargs.get(f"group_{key}", given.get("group_peer"))
        if peer is None and group_peer is not None:
            peer = module.get_global_rank(group if group is not None else module._get_default_group(), group_peer)
        entry = {
            "op": side,
            "call": name,
            "peer": peer,
            "tag": kwargs.get("tag", given.get("tag", 0)),
            "group": _group_name(module, group),
            "site": _site(),
            "state": "pending",
            "posted": time.monotonic(),
        }
        with _lock:
            _seq[0] += 1
            entry["seq"] = _seq[0]
            count = f"{side}:{'any' if peer is None else peer}"
            _posted[count] = _posted.get(count, 0) + 1
            _ops.append(entry)
            del _ops[:-KEEP]
        return entry
    except Exception:  # never into the job
        return None


def _group_name(module: ModuleType, group: Any) -> str:
    if group is None:
        return "0"  # the default group's name
    try:
        return str(module._get_process_group_name(group))
    except Exception:
        return "?"


def _site() -> str | None:
    """``file:line`` of the innermost frame of the user's code that led here."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not any(part in filename for part in _SKIP):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def answer() -> dict[str, Any]:
    """What this rank has posted: its last ops with their state now, and the counts per side and peer."""
    with _lock:
        ops, posted, skipped = list(_ops), dict(_posted), list(_skipped)
    out = []
    for entry in ops:
        state = entry["state"]
        work = entry.get("work")
        if state == "pending" and work is not None:
            try:
                state = "completed" if work.is_completed() else "pending"
            except Exception:
                state = "unknown"
        out.append({k: v for k, v in entry.items() if k not in ("work", "posted")} | {"state": state})
    rank = os.environ.get("RANK")
    return {
        "rank": int(rank) if rank and rank.isdigit() else None,
        "ops": out,
        "posted": posted,
        "skipped": skipped,
        "age_s": {str(e["seq"]): round(time.monotonic() - e["posted"], 1) for e in ops},
    }


def _handler(request: Any, response: Any) -> None:
    import json

    response.set_content(json.dumps(answer()).encode(), "application/json")
    response.set_status(200)
