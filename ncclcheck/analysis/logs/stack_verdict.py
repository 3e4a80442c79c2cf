"""Judge pasted stack dumps with the stack analysis ``watch`` uses (``analysis/stacks``): where each process stands,
and whom the stacks single out. A dump is one instant: it says where each process was, not how long it stood there,
so a culprit is named only where the others wait on the ranks and it alone does not; one process alone names nobody.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

from ncclcheck.analysis.stacks import COLLECTIVES, WORLD_CALLS, collective, cuda_sync, in_backward, loader_wait
from ncclcheck.model.findings import Evidence, Finding
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.stack_dumps import NOT_RANKS, WAITING, DumpedProcess, DumpedThread, Place, StackDump, Stood
from ncclcheck.model.stacks import Frame, mine

LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "torchrun", "accelerate launch", "deepspeed.launcher")
LAUNCHER_FILES = ("torch/distributed/run.py", "torch/distributed/elastic/agent/")
IDLE_LOOPS = (("main_loop", "ray/_private/worker.py"),)  # a worker process waiting for its next task
P2P_CALLS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "wait"})
NOT_STDLIB = frozenset({"test", "code", "trace", "profile", "token"})  # names users give their scripts
LOCK_CALLS = ("PyThread_acquire_lock_timed", "lock_PyThread_acquire_lock", "acquire_timed", "rlock_acquire")
COPIES = ("to_device", "copy_to_device", "to_cuda", "_to_gpu")  # a function named for a host-device copy
WAIT_FIXES = {
    "dataloader": "its DataLoader's workers hold it: dump them (py-spy dump --pid WORKER: the children of that "
    "rank) and read where they stand; num_workers=0 for that loader confirms it",
    "unreadable": "a process py-spy cannot suspend is usually in the kernel's uninterruptible sleep (a driver, the "
    "GPU, a file system): cat /proc/PID/stack and /proc/PID/wchan, dmesg for Xid or I/O errors, nvidia-smi",
    "elsewhere": "its own code at that line holds the others: a path only this rank takes (data, a condition on the "
    "rank, a checkpoint), a loop that does not end, or a wait on something other than the ranks",
}


WORLD_CALL_FIX = (
    "every rank of the world calls init_process_group and each new_group, members or not, in the same order: move "
    "the call out of the branch that skips it on these ranks (or, where only members call it, pass "
    "use_local_synchronization=True)"
)


def own(frame: Frame) -> bool:
    """Whether a pasted frame is the job's own code (a framework's included): py-spy prints the standard library
    relative (``threading.py``, ``multiprocessing/process.py``) and site-packages relative (``torch/...``)."""
    if frame.filename.startswith("/"):
        return mine(frame)
    if frame.native or not frame.filename or frame.filename.startswith(("<", "torch/")):
        return False
    top = frame.filename.split("/", 1)[0].removesuffix(".py")
    return top not in sys.stdlib_module_names or top in NOT_STDLIB


def _site(frames: Sequence[Frame]) -> str | None:
    frame = next((f for f in frames if own(f)), None)
    return f"{frame.filename}:{frame.line} ({frame.function})" if frame else None


def _listed_collective(frames: Sequence[Frame]) -> str | None:
    """A listing's bare top function that names a collective (``wait`` alone may be any wait: not counted)."""
    if len(frames) == 1 and not frames[0].filename and frames[0].function != "wait":
        name = frames[0].function
        return name if name in COLLECTIVES or name in WORLD_CALLS else None
    return None


def stood(process: DumpedProcess) -> Stood:
    """Where one process stands."""
    command = process.command or ""
    main = process.main
    frames = main.frames if main else ()
    if any(word in command for word in LAUNCHERS) or any(part in f.filename for f in frames for part in LAUNCHER_FILES):
        return Stood(process, "launcher", None, main, None, _launcher_words(process))
    if process.failed:
        return Stood(process, "unreadable", None, None, None, f"could not be dumped ({process.failed})")
    if process.fatal:
        site = _site(process.threads[0].frames) if process.threads else None
        return Stood(process, "crashed", None, None, site, f"crashed ({process.fatal}){f' at {site}' if site else ''}")
    if main is None:
        return Stood(process, "unknown", None, None, None, "its main thread is not in the paste")
    site = _site(frames)
    at = f" at {site}" if site else ""
    op = collective(frames) or _listed_collective(frames)
    if op is not None:
        kind: Place = "startup" if op in WORLD_CALLS else "collective"
        return Stood(process, kind, op, main, site, f"waits in {op}{at}")
    inner = next((f for f in frames if not f.native), None)
    if inner is not None and any(inner.function == fn and inner.filename.endswith(file) for fn, file in IDLE_LOOPS):
        return Stood(process, "idle-worker", None, main, site, f"waits for its next task in {inner.function}")
    sync = cuda_sync(frames)
    if sync is not None:
        words = f"waits at a CUDA synchronisation ({sync}){at}: for the GPU's queue"
        return Stood(process, "cuda-sync", None, main, site, words)
    active = main.active is not False
    if not active or not _busy_elsewhere(main):
        helper = _helper_in_collective(process, main)
        if helper is not None:
            thread, helper_op = helper
            words = f"waits in {helper_op} on {_thread_name(thread)} (its main thread{at})"
            return Stood(process, "collective", helper_op, thread, _site(thread.frames) or site, words)
    if in_backward(frames):
        words = f"waits in backward{at}: the autograd engine runs the gradient hooks' collectives on its own threads"
        return Stood(process, "backward", None, main, site, words)
    if loader_wait(frames):
        return Stood(process, "dataloader", None, main, site, f"waits on its DataLoader's workers{at}")
    copy = next((f for f in frames if own(f) and f.function.endswith(COPIES)), None) if active else None
    if copy is not None and frames and frames[0] is copy:
        words = (
            f"stands in {copy.function} ({copy.filename}:{copy.line}), a copy between host and device by its name: "
            "such a copy waits for the GPU's queue (a CUDA synchronisation); `py-spy dump --native` shows the C call"
        )
        return Stood(process, "cuda-sync", None, main, site, words, certain=False)
    how = "busy" if main.active else "idle" if main.active is False else "stands"
    if any(f.native and f.function.endswith(LOCK_CALLS) for f in frames):
        how = "waits on a lock"  # the C call under a ``with lock:`` or ``lock.acquire()``
    place = f"{inner.function} ({inner.filename}:{inner.line})" if inner else "an unknown place"
    words = f"{how} in {place}{_under(site, inner)}, in no collective{_others(process, main)}"
    return Stood(process, "elsewhere", None, main, site, words)


def _others(process: DumpedProcess, main: DumpedThread) -> str:
    """Where the process's other threads stand in its own code (a lock's holder, a thread that should signal): the
    threads of the runtime (a queue's feeder, a pool's workers) show no frame of its own and are left out."""
    said = []
    for thread in process.threads:
        frame = next((f for f in thread.frames if own(f)), None)
        if thread is main or frame is None:
            continue
        how = "busy" if thread.active else "idle"
        said.append(f"{_thread_name(thread)} {how} in {frame.function} ({frame.filename}:{frame.line})")
    return f"; its other threads: {', '.join(said)}" if said else ""


def _under(site: str | None, inner: Frame | None) -> str:
    if site is None or inner is None or site.startswith(f"{inner.filename}:{inner.line} "):
        return ""
    return f" under {site}"


def _busy_elsewhere(main: DumpedThread) -> bool:
    """An active main thread whose innermost frame is its own code runs there (not a wait on another thread)."""
    inner = next((f for f in main.frames if not f.native), None)
    return inner is not None and own(inner)


def _helper_in_collective(process: DumpedProcess, main: DumpedThread) -> tuple[DumpedThread, str] | None:
    """Another thread of the process in a collective, while the main thread waits (on it, or on the autograd
    engine whose unnamed threads run the hooks)."""
    for thread in process.threads:
        if thread is not main and (op := collective(thread.frames)) is not None:
            return thread, op
    return None


def _thread_name(thread: DumpedThread) -> str:
    return f'thread {thread.tid} "{thread.name}"' if thread.name else f"unnamed thread {thread.tid} (autograd's?)"


def _launcher_words(process: DumpedProcess) -> str:
    words = "is the launcher (torchrun's agent), not a rank"
    if process.children:
        gone = [pid for pid, exited in process.children if exited]
        alive = [pid for pid, exited in process.children if not exited]
        words += f"; beside it, ps shows {len(gone)} of its {len(process.children)} workers exited (<defunct>)"
        if gone and alive:
            words += f" and {_pids(alive)} alive: {'it waits' if len(alive) == 1 else 'they wait'} on peers gone"
    return words


def _pids(pids: Sequence[int]) -> str:
    return ("PID " if len(pids) == 1 else "PIDs ") + ", ".join(map(str, pids))


def judge(dumps: Sequence[StackDump]) -> tuple[tuple[Stood, ...], tuple[Finding, ...]]:
    """Where every process of the dumps stands, and the findings: whom the stacks single out, or why they cannot."""
    findings: list[Finding] = []
    for dump in dumps:
        if dump.refused:
            findings.append(
                Finding(
                    logs_ids.STACKS_UNREADABLE,
                    "warning",
                    f"{dump.source}: {dump.refused}",
                    "dump each process to its own file: py-spy dump --pid PID > PID.txt for each rank, or "
                    "faulthandler.dump_traceback(file=...) to a file per rank",
                )
            )
    places = tuple(stood(p) for d in dumps for p in d.processes)
    ranks = [s for s in places if s.place not in NOT_RANKS]
    waiting = [s for s in ranks if s.place in WAITING]
    apart = [s for s in ranks if s.place not in WAITING]
    outside, inside = _outside_world_call(ranks)
    if outside:
        skipped = any(s.place in WAITING for s in outside)  # gone past the call: the code skipped it
        findings.append(_straggler(outside, inside, WORLD_CALL_FIX if skipped else ""))
    elif waiting and apart:
        findings.append(_straggler(apart, waiting))
    elif len(waiting) >= 2:
        findings.append(_all_waiting(waiting))
    elif len(ranks) == 1:
        findings.append(_alone(ranks[0]))
    elif any(s.place in ("launcher", "idle-worker") for s in places) and not ranks:
        findings.append(_not_ranks([s for s in places if s.place in ("launcher", "idle-worker")]))
    return places, tuple(findings)


def _outside_world_call(ranks: Sequence[Stood]) -> tuple[list[Stood], list[Stood]]:
    """The ranks outside the start-up or group-creation call the others wait in, and those in it: every rank of the
    world makes it (new_group with use_local_synchronization=True only its members: the stacks cannot show that)."""
    calls = {s.op for s in ranks if s.place == "startup"}
    if len(calls) != 1:
        return [], []
    call = calls.pop()
    inside = [s for s in ranks if s.op == call]
    outside = []
    for s in ranks:
        if s.op == call:
            continue
        if s.place in WAITING:  # in another collective: the order of the code differs between ranks
            words = f"{s.words}, not in {call}, which every rank of the world calls before going on"
            s = Stood(s.process, s.place, s.op, s.thread, s.site, words, s.certain)
        outside.append(s)
    return outside, inside


def _who(s: Stood) -> str:
    rank = f"rank {s.process.rank} " if s.process.rank is not None else ""
    return f"{rank}{s.process.label}"


def _evidence(s: Stood) -> Evidence:
    """The line of the paste it stands on: its thread's header (or its process's)."""
    return Evidence(s.process.source, s.thread.line if s.thread else s.process.line, f"{_who(s)} {s.words}")


def _ops(waiting: Sequence[Stood]) -> str:
    counted = Counter(s.op or ("a CUDA synchronisation" if s.place == "cuda-sync" else s.place) for s in waiting)
    return ", ".join(f"{op} ×{n}" if n > 1 else op for op, n in counted.most_common())


def _ranks(stood: Sequence[Stood]) -> tuple[int, ...]:
    return tuple(sorted({s.process.rank for s in stood if s.process.rank is not None}))


def _straggler(apart: Sequence[Stood], waiting: Sequence[Stood], fix: str = "") -> Finding:
    said = "; ".join(f"{_who(s)} {s.words}" for s in apart)
    others = "the other process of the paste waits" if len(waiting) == 1 else f"the {len(waiting)} others wait"
    message = (
        f"{said}, while {others} on the ranks ({_ops(waiting)}): as dumped, "
        f"{'it is' if len(apart) == 1 else 'they are'} what the others wait for"
    )
    places = {s.place for s in apart}
    fix = fix or (WAIT_FIXES.get(next(iter(places)), "") if len(places) == 1 else "")
    fix = fix or "read each of these processes' line: the others wait for them in the collective"
    return Finding(
        logs_ids.STACKS_STRAGGLER,
        "error",
        message,
        fix,
        ranks=_ranks([*apart, *waiting]),
        culprits=_ranks(apart),
        evidence=tuple(_evidence(s) for s in apart),
    )


def _all_waiting(waiting: Sequence[Stood]) -> Finding:
    same = len({(s.place, s.op) for s in waiting}) == 1
    how = f"every process of the paste waits on the others ({_ops(waiting)})"
    if all(s.op in P2P_CALLS for s in waiting):
        message = (
            f"{how}, in point-to-point calls: a cycle (each rank receives, or sends, first) or a peer that never posts "
            "the matching call; the peers are in each frame's locals (py-spy dump --locals), and `ncclcheck run` "
            "records every rank's point-to-point ops"
        )
    elif same:
        message = (
            f"{how}: the stacks single out nobody. With NCCL this is a hang inside the collective: the transport, "
            "a rank not in the paste that never launched it, or a kernel that never returned"
        )
    else:
        message = (
            f"{how}, in different calls: sub-groups (pipeline stages, tensor-parallel groups) may wait in different "
            "collectives; their groups and sequence numbers decide whether they mismatch, which the stacks do not hold"
        )
    return Finding(
        logs_ids.STACKS_WAITING,
        "warning",
        message,
        "read the Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, then `ncclcheck logs` over its dumps) or NCCL RAS "
        "(echo VERBOSE STATUS | nc localhost 28028) for the rank that did not launch the collective; dump every rank",
        ranks=_ranks(waiting),
    )


def _alone(s: Stood) -> Finding:
    nccl = ""
    if s.place == "cuda-sync":
        nccl = (
            "; with NCCL, a collective launched before it has not completed (which one: the Flight Recorder); alone, "
            "a GPU or driver stall cannot be ruled out"
        )
    elif s.place == "backward":
        nccl = "; the collective it waits on is on an autograd thread, if any (dump with all threads, --native)"
    return Finding(
        logs_ids.STACKS_ONE,
        "warning",
        f"{_who(s)} {s.words}{nccl}. One process alone names no culprit: where the other ranks stand decides",
        "dump every rank (for PID in $(pgrep -P LAUNCHER_PID); do py-spy dump --pid $PID; done) and give them all to "
        "`ncclcheck logs`, or watch the live job with `ncclcheck watch`",
        ranks=_ranks([s]),
        evidence=(_evidence(s),),
    )


def _not_ranks(places: Sequence[Stood]) -> Finding:
    said = "; ".join(f"{_who(s)} {s.words}" for s in places)
    return Finding(
        logs_ids.STACKS_NOT_RANKS,
        "warning",
        f"no rank's stack in the paste: {said}. The hang is in the ranks, not in these",
        "dump the ranks themselves: the launcher's children (pgrep -P LAUNCHER_PID), each with py-spy dump --pid",
    )
