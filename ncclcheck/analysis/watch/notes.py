"""What the live view cannot see, and how to let it: notes made from the source's facts, shown whatever the verdict."""

from __future__ import annotations

from collections.abc import Sequence

PY_SPY_MISSING = "py-spy is not installed: no stacks (pip install py-spy)"
PTRACE_FIX = (
    "py-spy may not read these processes (ptrace): run ncclcheck as root or the job's user with "
    "CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE; k8s: securityContext.capabilities.add [SYS_PTRACE]), "
    "or `sudo sysctl kernel.yama.ptrace_scope=0`; the table still shows process state"
)
SOCKETS_NOTE = (
    "bytes on the ranks' sockets cannot be counted from here (the ranks live in another network namespace, a "
    "container or pod, or their fd tables are not readable by this user): a collective's progress is judged from "
    "stacks and main-thread CPU only; run ncclcheck inside the job's container, or as root or the job's user"
)
GUESSED_NOTE = (
    "mp.spawn ranks are numbered in start order: py-spy could not read torch's spawn index (see the ptrace note)"
)
NODES_NOTE = (
    "mp.spawn across nodes: ranks here are numbered by their spawn index on this node, which is their global rank "
    "only on the first node (torch.multiprocessing.spawn does not say which node this is)"
)


def ptrace_denied(stack_error: str) -> bool:
    """py-spy's words when the kernel refuses it the process (EPERM from ptrace or process_vm_readv)."""
    return "ermission" in stack_error or "ptrace" in stack_error.lower() or "Operation not permitted" in stack_error


def watch_notes(
    stacks_wanted: bool,
    py_spy: bool,
    stack_errors: Sequence[str],
    sockets_readable: bool,
    how: str,
    restarted: tuple[str, tuple[int, ...]] | None = None,
) -> tuple[str, ...]:
    """Every note that holds: ``how`` is how the job was found; ``restarted``: (clock time, new pids)."""
    notes: tuple[str, ...] = (PY_SPY_MISSING,) if stacks_wanted and not py_spy else ()
    if restarted is not None:
        notes += (f"the ranks restarted at {restarted[0]} (new pids {', '.join(map(str, restarted[1]))})",)
    if any(ptrace_denied(e) for e in stack_errors):
        notes += (PTRACE_FIX,)
    if not sockets_readable:
        notes += (SOCKETS_NOTE,)
    if how == "spawn-guessed":
        notes += (GUESSED_NOTE,)
    if how == "spawn-nodes":
        notes += (NODES_NOTE,)
    return notes
