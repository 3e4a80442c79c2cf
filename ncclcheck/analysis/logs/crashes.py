"""Deaths read across lines: Python's faulthandler block, a C++ ``terminate called``, torchrun's agent saying how a
local rank died, a helper thread's uncaught exception, and torchrun's ChildFailedError without its table.

Each is tied to a rank: by its launcher prefix, else by torchrun's failure table (the one rank that died of the
block's signal, or the pid the agent's line gives). The faulthandler block prints no pid and no rank: when
neither the prefix nor the table singles one out, the finding says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ncclcheck.analysis.rank_exits import hint, signal_of
from ncclcheck.model.findings import Evidence, Finding, Severity
from ncclcheck.model.ids import logs as logs_ids
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.ranks import span

FAULT = re.compile(
    r"^Fatal Python error: (?P<what>Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction)"
)
WHAT_SIGNAL = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}
# faulthandler's thread headers (3.12 adds the thread's name in brackets) and frames: ``line N in fn``, no comma
THREAD = re.compile(
    r"^(?:(?P<current>Current thread)|Thread) 0x[0-9a-fA-F]+ (?:\[[^\]]*\] )?\(most recent call first\)"
)
FRAME = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+|\?\?\?) in (?P<fn>\S+)$')
TERMINATE = re.compile(r"^terminate called after throwing an instance of '")
WHAT = re.compile(r"^what\(\): ")
AGENT_EXIT = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\) of binary"
)
THREAD_DIED = re.compile(r"^Exception in thread (?P<name>.{1,120}?):$")
# Python's unraisable hook (Python/errors.c: "Exception ignored in: %R", "Exception ignored in atexit callback",
# 3.13's "Exception ignored while ..."): the traceback and exception after it were ignored, the process went on
IGNORED = re.compile(r"^Exception ignored (?:in|on|while)\b")
# bash's report of a job it ran that a signal ended: "./run.sh: line 4:  8801 Segmentation fault      python3 x.py"
SHELL = re.compile(
    r"^(?P<script>\S+): line (?P<n>\d+): +(?P<pid>\d+) (?P<what>Segmentation fault|Bus error|Aborted|Floating point"
    r" exception|Illegal instruction)(?: +\(core dumped\))? +(?P<cmd>.{1,200})"
)
# UCX's signal handler: "==== backtrace (tid:  25645) ====", frames " 1 0x000000000006a920 SaveProxy()  /src/proxy.cc:518",
# then a rule of "=" (Open MPI's handler prints "[host:pid] [ 1] /lib/x.so(fn+0x1a)[0x7f…]")
BACKTRACE = re.compile(
    r"^==== backtrace \(tid:\s*(?P<tid>\d+)\) ====$|^\[(?P<who>[^\]\s]+)\] \*\*\* Process received signal \*\*\*$"
)
NATIVE_FRAME = re.compile(
    r"^\s*\d+\s+0x[0-9a-fA-F]+\s+(?P<fn>\S+?)(?:\(\))?\s+(?P<where>\S+)$"
    r"|^(?:\[[^\]]*\] )?\[\s*\d+\] (?P<lib>[^\s(]+)\((?P<fn2>[^+)]*)\+0x[0-9a-f]+\)\s*\[0x[0-9a-f]+\]$"
)
RULE_END = re.compile(r"^={6,}$|\*\*\* End of error message \*\*\*$")
# the handler's own frames, and the C library's: not where the process crashed
HANDLER_FRAMES = re.compile(
    r"^(?:__sigaction|killpg|raise|abort|__restore_rt|__GI_|ucs_|uct_|ucm_|_?_?libc_|gsignal|__pthread_kill|"
    r"pthread_kill|\?\?\?|)$|^(?:ucs_|uct_|__GI_)"
)
LONE_CHILD = re.compile(r"^(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError:$")
SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)")
NOT_USER = re.compile(r"/lib/python\d[\d.]*/|site-packages|dist-packages|/torch/|<frozen|^<")
LITERALS = (
    "most recent call first",
    "Extension modules: ",
    'File "',
    "what(): ",
    "Exception in thread",
    "exitcode",
    "backtrace (tid",
)
MAX = 64  # blocks, exits and threads kept
IGNORED_SPAN = 400  # lines an ignored exception's traceback may take (Python folds repeated frames into one line)
MAX_TIMES = 10_000  # agents' failure times kept (one a node: a job's tables are ordered by them)

KINDS = (
    (FAULT, "fault"),
    (THREAD, "thread"),
    (FRAME, "frame"),
    (TERMINATE, "terminate"),
    (WHAT, "what"),
    (THREAD_DIED, "thread-died"),
    (IGNORED, "ignored"),
    (LONE_CHILD, "child-error"),
    (SHELL, "shell"),
    (BACKTRACE, "backtrace"),
    (NATIVE_FRAME, "native-frame"),
    (RULE_END, "rule-end"),
)


def kind_of(stripped: str) -> str | None:
    """Which line of a crash this is, from its text alone (its stripped text)."""
    if stripped.startswith("Extension modules: "):
        return "end"
    for pattern, kind in KINDS:
        if pattern.search(stripped):
            return kind
    return "agent" if "failed (exitcode: " in stripped and AGENT_EXIT.search(stripped) else None


@dataclass
class Block:
    """A faulthandler block (``Fatal Python error``) or a C++ terminate, as read so far."""

    signal: str
    what: str
    rank: int | None  # its prefix's
    file: str
    first: int
    last: int
    frames: list[tuple[str, str, str]] = field(default_factory=list)  # the crashing thread's: file, line, fn
    current: bool = False  # reading the crashing thread's frames
    sizes: tuple[int, int] | None = None  # gloo's "N vs M": bytes received, bytes expected
    shell: str = ""  # a shell's report of the crash: the pid and command it names (no frames, no block)
    pid: str | None = None


@dataclass
class Backtrace:
    """A signal handler's native backtrace (UCX's ``==== backtrace (tid: N) ====``): its frames, innermost first."""

    tid: str
    file: str
    line: int
    frames: list[tuple[str, str]] = field(default_factory=list)  # function, where ("proxy.cc:518", "???:0", a .so)


def with_backtrace(findings: list[Finding], crashes: CrashFold) -> list[Finding]:
    """The first native-crash finding told where the process crashed in native code, from the handler's backtrace:
    its first frame past the handler's own, and whether that is NCCL's code."""
    traces = [b for b in crashes.backtraces if b.frames]
    at = next((i for i, f in enumerate(findings) if f.id == logs_ids.NATIVE_CRASH), None)
    if not traces or at is None:
        return findings
    trace = traces[0]
    frames = [
        (fn, where)
        for fn, where in trace.frames
        if not HANDLER_FRAMES.search(fn.split("(")[0]) or (not fn and not C_LIBRARY.search(where))
    ]
    if not frames:
        return findings
    said = list(dict.fromkeys(_native_frame(fn, where) for fn, where in frames[:6]))  # a library's frames once
    chain = " <- ".join(said[:3])
    nccl = any(fn.startswith("nccl") or "/nccl" in where or "libnccl" in where for fn, where in frames[:4])
    inside = ": inside NCCL's own code, not the network or the user's" if nccl else ""
    thread = f"thread {trace.tid}" if trace.tid.isdigit() else trace.tid
    found = findings[at]
    message = f"{found.message}; its native backtrace ({thread}): {chain}{inside}"
    evidence = (*found.evidence, Evidence(trace.file, trace.line, f"the native backtrace of {thread}"))
    return [*findings[:at], replace(found, message=message, evidence=evidence[:5]), *findings[at + 1 :]]


C_LIBRARY = re.compile(r"/lib(?:c|pthread|dl)[.-]")  # the C library's frames: the signal's trampoline, not the crash


def _native_frame(fn: str, where: str) -> str:
    """ "SaveProxy() at proxy.cc:518", "ncclGroupEnd()", or a library's frame "in lmdb/cpython…so"."""
    if not fn:
        return f"in {_short(where, 2)}"
    return f"{fn}()" if where.startswith("?") else f"{fn}() at {_short(where, 1)}"


@dataclass(frozen=True)
class AgentExit:
    """torchrun's agent: ``failed (exitcode: -11) local_rank: 1 (pid: N) of binary``."""

    local_rank: int
    pid: str
    exitcode: int
    evidence: Evidence


@dataclass
class ThreadDeath:
    """``Exception in thread NAME:`` and the exception its traceback ends with."""

    rank: int | None
    name: str
    evidence: Evidence
    error: str | None = None
    site: str | None = None


@dataclass
class CrashFold:
    """The crash lines of a fold, kept per rank prefix while a block is open."""

    blocks: list[Block] = field(default_factory=list)
    open: dict[int | None, Block] = field(default_factory=dict)
    exits: list[AgentExit] = field(default_factory=list)
    threads: list[ThreadDeath] = field(default_factory=list)
    child_error: Evidence | None = None
    pending: dict[int | None, ThreadDeath] = field(default_factory=dict)  # per rank, a death whose error is to come
    # per rank, where Python's unraisable hook began a report: the exception that ends it (its traceback's last line)
    # was ignored; one more than IGNORED_SPAN lines on, or in another file, is not that report's
    ignoring: dict[int | None, tuple[str, int]] = field(default_factory=dict)
    # worker pid -> when its agent logged its failure (the header's time; None: two agents name the pid, as
    # containers on several nodes do: it orders nothing)
    agent_times: dict[int, str | None] = field(default_factory=dict)
    backtraces: list[Backtrace] = field(default_factory=list)  # the signal handlers' native backtraces
    native: Backtrace | None = None  # the one being read

    def line(self, kind: str, file: str, number: int, text: str, rank: int | None, time: str | None = None) -> bool:
        """A line ``kind_of`` named (``time``: its header's); True when it was read here (it raises no alarm of its
        own)."""
        stripped = text.strip()
        if kind in ("backtrace", "native-frame", "rule-end"):
            return self._native(kind, file, number, stripped)
        if kind in ("fault", "terminate"):
            self._open(kind, file, number, stripped, rank)
            return kind == "fault"  # a terminate's own rule (process-aborted) reads it too
        block = self.open.get(rank)
        if kind == "agent" and (m := AGENT_EXIT.search(stripped)):
            if time is not None and len(self.agent_times) < MAX_TIMES:
                known = self.agent_times.setdefault(int(m["pid"]), time)
                if known != time:
                    self.agent_times[int(m["pid"])] = None
            if len(self.exits) < MAX:
                self.exits.append(
                    AgentExit(int(m["local"]), m["pid"], int(m["code"]), Evidence(file, number, text[:500]))
                )
            return True
        if kind == "thread-died" and len(self.threads) < MAX and (m := THREAD_DIED.search(stripped)):
            death = ThreadDeath(rank, m["name"], Evidence(file, number, text[:500]))
            self.threads.append(death)
            self.pending[rank] = death
            return True
        if kind == "shell" and len(self.blocks) < MAX and (m := SHELL.search(stripped)):
            how = (
                f"{m['what']} (its shell reported it: {m['script']} line {m['n']}, pid {m['pid']}: {m['cmd'].strip()})"
            )
            self.blocks.append(Block(WHAT_SIGNAL[m["what"]], how, rank, file, number, number, shell=how, pid=m["pid"]))
            return True
        if kind == "ignored":
            self.ignoring[rank] = (file, number)
            return True
        if kind == "child-error":
            self.child_error = self.child_error or Evidence(file, number, text[:500])
            return False
        if block is None:
            return False
        block.last = number
        if kind == "thread":
            block.current = THREAD.search(stripped)["current"] is not None  # type: ignore[index]
        elif kind == "frame" and block.current and len(block.frames) < 32 and (m := FRAME.search(stripped)):
            block.frames.append((m["file"], m["line"], m["fn"]))
        elif kind == "what":  # a terminate's message: it ends the block, and its rules read it
            sizes = SIZES.search(stripped)
            block.sizes = (int(sizes["got"]), int(sizes["want"])) if sizes else None
            if not block.what:
                del self.open[rank]
            return False
        elif kind == "end":
            del self.open[rank]
        return True

    def _native(self, kind: str, file: str, number: int, stripped: str) -> bool:
        """A signal handler's backtrace: its header, frames and closing rule (interleaved lines of other processes
        do not end it: its frames are told apart by their shape)."""
        if kind == "backtrace" and len(self.backtraces) < MAX and (m := BACKTRACE.match(stripped)):
            self.native = Backtrace(m["tid"] or m["who"], file, number)
            self.backtraces.append(self.native)
            return True
        if self.native is None:
            return False
        if kind == "rule-end":
            self.native = None
        elif (m := NATIVE_FRAME.match(stripped)) is not None and len(self.native.frames) < 32:
            self.native.frames.append((m["fn"] or m["fn2"] or "", m["where"] or m["lib"] or ""))
        return True

    def ignored(self, rank: int | None, file: str, number: int) -> bool:
        """Whether an exception's line at ``file:number`` ends a report of Python's unraisable hook for this rank (the
        exception was ignored): the report ends here either way."""
        began = self.ignoring.pop(rank, None)
        return began is not None and began[0] == file and 0 < number - began[1] <= IGNORED_SPAN

    def other(self, rank: int | None) -> None:
        """A line of this rank's that is none of a block's: the block it had open has ended."""
        self.open.pop(rank, None)

    def exception(self, rank: int | None, text: str, site: str | None) -> None:
        """An exception's line: the end of the traceback of this rank's thread that died, if one is open."""
        death = self.pending.pop(rank, None)
        if death is not None:
            death.error, death.site = text.strip()[:200], site

    def _open(self, kind: str, file: str, number: int, stripped: str, rank: int | None) -> None:
        if len(self.blocks) >= MAX:
            return
        fault = FAULT.search(stripped)
        what = f"Fatal Python error: {fault['what']}" if fault else ""
        block = Block(WHAT_SIGNAL[fault["what"]] if fault else "SIGABRT", what, rank, file, number, number)
        self.blocks.append(block)
        self.open[rank] = block


def who(block: Block, failures: tuple[ChildFailure, ...], exits: list[AgentExit]) -> Who:
    """The rank a block came from: its prefix, its pid in torchrun's table, else the one rank torchrun saw die of
    its signal."""
    rank, signal = block.rank, block.signal
    if rank is not None:
        return Who((rank,), _where(next((f for f in failures if f.rank == rank), None)), "")
    same = [f for f in failures if block.pid and str(f.pid) == block.pid]
    if same:
        return Who((same[0].rank,), _where(same[0]), "its pid in torchrun's failure table")
    died = [f for f in failures if f.signal == signal]
    if len(died) == 1:
        return Who((died[0].rank,), _where(died[0]), f"the only rank torchrun's failure table says died of {signal}")
    if len(died) > 1:
        ranks = span([f.rank for f in died])
        return Who((), "", f"one of ranks {ranks} (each died of {signal}: which printed it cannot be told)")
    local = [e for e in exits if signal_of(e.exitcode) == signal]
    if len(local) == 1:
        e = local[0]
        return Who((), "", f"local rank {e.local_rank} (pid {e.pid}; its global rank is not in these logs)")
    return Who((), "", "a process whose rank is not in these logs (no rank prefix; no torchrun line names it)")


@dataclass(frozen=True)
class Who:
    ranks: tuple[int, ...]
    where: str  # "local rank 1 on localhost, pid 7814"
    said: str  # how it was told, or the words for a rank that cannot be told

    def name(self) -> str:
        """ "rank 1 (local rank 1 on localhost, pid 7814; the only rank ... died of SIGSEGV)", or the words."""
        if not self.ranks:
            return self.said
        told = "; ".join(p for p in (self.where, self.said) if p)
        return f"rank {self.ranks[0]}" + (f" ({told})" if told else "")


def _where(entry: ChildFailure | None) -> str:
    if entry is None:
        return ""
    parts = [f"local rank {entry.local_rank}" if entry.local_rank is not None else ""]
    parts[0] += f" on {entry.host}" if entry.host else ""
    parts.append(f"pid {entry.pid}" if entry.pid else "")
    return ", ".join(p.strip() for p in parts if p.strip())


FIXES = {
    "SIGSEGV": "a crash in native code (an extension, a CUDA/NCCL library, ctypes): the frames are where Python was"
    " when it happened; rerun with TORCH_SHOW_CPP_STACKTRACES=1 and NCCL_DEBUG=INFO for the C++ side; the peers'"
    " 'connection closed' errors are echoes of it",
    "SIGABRT": "an abort: a C++ exception nobody caught, a failed assert, or os.abort() (the frames say which code);"
    " when torch's ProcessGroupNCCL aborted it, the cause is earlier in that rank's output",
    "SIGBUS": "SIGBUS is a memory mapping gone bad: /dev/shm too small for NCCL's buffers (docker's 64 MB: `ncclcheck"
    " env`), or a file mapped into memory (a dataset, a checkpoint) that shrank or vanished while in use",
}


def crash_findings(crashes: CrashFold, failures: tuple[ChildFailure, ...]) -> list[Finding]:
    """native-crash for each faulthandler block, with its rank and the top frame in the user's code."""
    faults = [b for b in crashes.blocks if b.what]
    if not faults:
        return []
    said: list[str] = []
    ranks: set[int] = set()
    culprits: set[int] = set()
    evidence: list[Evidence] = []
    for block in faults:
        named = who(block, failures, crashes.exits)
        where = "" if block.shell else _frames(block)
        said.append(f"{named.name()} crashed: {block.what} ({block.signal}){where}")
        ranks.update(named.ranks)
        if _user(block) is not None or block.signal != "SIGABRT":
            culprits.update(named.ranks)
        evidence.append(Evidence(block.file, block.first, block.what))
    also = f"; also: {'; '.join(said[1:4])}" if len(said) > 1 else ""
    fix = FIXES.get(faults[0].signal) or hint(faults[0].signal)
    # an abort with no frame of the user's code is most often torch's own, after an error reported beside it
    severity: Severity = "error" if culprits or any(b.signal != "SIGABRT" for b in faults) else "warning"
    return [
        Finding(
            logs_ids.NATIVE_CRASH,
            severity,
            said[0] + also,
            fix,
            tuple(sorted(ranks)),
            tuple(evidence[:5]),
            tuple(sorted(culprits)),
        )
    ]


def _user(block: Block) -> int | None:
    return next((i for i, (file, _, _) in enumerate(block.frames) if not NOT_USER.search(file)), None)


def _frames(block: Block) -> str:
    """ " at train.py:17 in crash (called from train.py:33 in step); innermost: string_at in ctypes/__init__.py:519"."""
    if not block.frames:
        return " (faulthandler printed no Python frame of the crashing thread)"
    top = _user(block)
    if top is None:
        file, line, fn = block.frames[0]
        return f" in {fn} ({_short(file)}:{line}), outside the user's code (no frame of it in the crashing thread)"
    file, line, fn = block.frames[top]
    callers = [f"{_short(f)}:{n} in {c}" for f, n, c in block.frames[top + 1 : top + 3]]
    out = f" at {_short(file)}:{line} in {fn}" + (f" (called from {'; '.join(callers)})" if callers else "")
    if top:
        inner_file, inner_line, inner_fn = block.frames[0]
        out += f"; innermost: {inner_fn} in {_short(inner_file, 2)}:{inner_line}"
    return out


def _short(path: str, parts: int = 1) -> str:
    return "/".join(path.rsplit("/", parts)[-parts:])


def attribute(findings: list[Finding], crashes: CrashFold, failures: tuple[ChildFailure, ...]) -> list[Finding]:
    """A C++ terminate's lines carry no rank: the findings made from them get the one rank torchrun saw die of
    SIGABRT; gloo's wrong-size message then says who received what."""
    out = list(findings)
    for block in crashes.blocks:
        named = who(block, failures, crashes.exits) if not block.what else None
        if named is None or not named.ranks:
            continue
        for i, f in enumerate(out):
            inside = any(e.file == block.file and block.first <= e.line <= block.last for e in f.evidence)
            if not inside or f.ranks:
                continue
            message = f.message
            if f.id == logs_ids.COLLECTIVE_MISMATCH and block.sizes:
                got, want = block.sizes
                message += (
                    f"; {named.name()} received {got} bytes where it expected {want} and aborted: the rank that sent"
                    " them ran a different size or collective"
                )
            out[i] = Finding(f.id, f.severity, message, f.fix, named.ranks, f.evidence, f.culprits)
    return out


def thread_findings(crashes: CrashFold, waited: dict[str, set[int]], seen: frozenset[int]) -> list[Finding]:
    """thread-died: a rank's helper thread raised; joined to the timeout of the others, when they waited on it."""
    deaths = [d for d in crashes.threads if d.error]
    if not deaths:
        return []
    first = deaths[0]
    whose = f"rank {first.rank}'s thread {first.name}" if first.rank is not None else f"thread {first.name}"
    site = f" at {first.site}" if first.site else ""
    message = f"{whose} died with {first.error}{site}" + ("" if first.rank is not None else " (its lines name no rank)")
    ranks, culprits = ((first.rank,), (first.rank,)) if first.rank is not None else ((), ())
    for fid, reporters in waited.items():
        if not reporters:
            continue
        if first.rank is not None and first.rank in reporters:
            message += f"; rank {first.rank} itself then reported a timeout ({fid})"
        elif first.rank is not None:
            message += (
                f"; the others (rank(s) {span(sorted(reporters))}) then timed out ({fid}) and rank {first.rank} did"
                f" not: they waited on rank {first.rank}, which never reached the collective"
            )
        elif len(silent := sorted(seen - reporters)) == 1:
            message += (
                f"; the others (rank(s) {span(sorted(reporters))}) then timed out ({fid}) and rank {silent[0]} alone"
                f" did not: the thread was most likely rank {silent[0]}'s (its lines carry no rank prefix, so this"
                " cannot be told for sure)"
            )
            ranks = (silent[0],)
        break
    if len(deaths) > 1:
        message += f"; {len(deaths) - 1} more thread(s) died too"
    fix = (
        "an exception in a thread ends only that thread: the rank's main loop goes on, waiting for what the thread"
        " should have done (a queue, a prefetch), and never reaches the next collective; fix the thread's error,"
        " and have the main thread check that its helpers are alive (or use concurrent.futures, which re-raises)"
    )
    return [
        Finding(logs_ids.THREAD_DIED, "error", message, fix, ranks, tuple(d.evidence for d in deaths[:5]), culprits)
    ]


def exit_findings(crashes: CrashFold, failures: tuple[ChildFailure, ...], found: set[str]) -> list[Finding]:
    """child-failed when torchrun's failure table is not in the logs: from its agent's lines, or, with none of
    them either, from a lone ``ChildFailedError:`` (a worker failed; which one cannot be told)."""
    if failures or found & {
        logs_ids.CHILD_FAILED,
        logs_ids.CHILD_NO_ERROR_FILE,
    }:  # the latter names the local rank itself
        return []
    fix = "torchrun's failure table and each rank's own output (its traceback, its signal) say why"
    if crashes.exits:
        parts = [f"local rank {e.local_rank} (pid {e.pid}) {_how(e.exitcode)}" for e in crashes.exits[:8]]
        message = (
            f"torchrun's agent: {'; '.join(parts)}; their global ranks are in torchrun's failure table, which is not"
            " in these logs"
        )
        sig = signal_of(crashes.exits[0].exitcode)
        return [
            Finding(
                logs_ids.CHILD_FAILED,
                "error",
                message,
                hint(sig) or fix,
                (),
                tuple(e.evidence for e in crashes.exits[:5]),
            )
        ]
    if crashes.child_error is not None:
        message = (
            "torchrun says a worker failed (ChildFailedError), but its failure table is not in these logs: which"
            f" rank failed, and how, cannot be told from them: {crashes.child_error.text.strip()}"
        )
        return [Finding(logs_ids.CHILD_FAILED, "error", message, fix, (), (crashes.child_error,))]
    return []


def _how(exitcode: int) -> str:
    sig = signal_of(exitcode)
    return f"died of {sig} (exit code {exitcode})" if sig else f"exited with code {exitcode}"
