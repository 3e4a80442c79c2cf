"""Read the Python stack dumps pasted into a log or a ticket: py-spy ``dump`` text (with or without ``--native``,
several processes one after another), faulthandler and ``dump_traceback`` output, gdb's ``py-bt``, a listing of
top functions per host, and bare frames. The one home of these text formats.

What pastes do to them (``tests/fixtures/pyspy_dumps/PATTERNS.md``): a prefix on every line (docker compose's
``name  | ``, torchrun's ``[rank3]:``, Ray's ``(Actor pid=N) ``, pdsh's ``host: ``), a command line hard-wrapped over
several lines, trailing spaces, blank lines inside a stack, Markdown fences and prose between dumps, a frame
wrapped over two lines, "4 in:" above several thread headers that share one frame list, a dump that failed, and
several processes writing at once, interleaved character by character: that is recognised and refused.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclcheck.model.stack_dumps import DumpedProcess, DumpedThread, Format, StackDump
from ncclcheck.model.stacks import Frame

PROCESS = re.compile(r"Process (\d+): (.*)$")
PYTHON = re.compile(r"Python v\d+\.\d+(?:\.\d+)?\b")
# py-spy's guess: idle, active, active+gil (it holds the GIL), gil
THREAD = re.compile(r'Thread (\d+|0x[0-9A-Fa-f]+) \((idle|active|active\+gil|gil)\)(?:: "(.*)")?$')
FAULT_THREAD = re.compile(r"(?:Current thread|Thread) (0x[0-9A-Fa-f]+) \(most recent call first\):$")
TRACEBACK = re.compile(r"Traceback \(most recent call first\):$")
FATAL = re.compile(r"Fatal Python error: (.+)$")
NO_FRAME = "<no Python frame>"  # faulthandler's line for a thread running no Python (a C++ thread, a server's own)
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)  # stacks_rank3.txt: one process, its rank
FILE_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<function>\S+)$')
# "Pyspy dump for PID N:" (sglang), or the user's own "py-spy dump --pid N" pasted before its output
ANNOUNCED = re.compile(r"(?:Pyspy|py-spy) dump for PID (\d+)|py-spy dump\b.*--pid[ =](\d+)\s*$", re.IGNORECASE)
FAILED = re.compile(r"Error: (Failed to \w+ process.*)$")
REASON = re.compile(r"Reason: (.+)$")
GROUP = re.compile(r"(\d+)\s+(?:processes\s+|ranks\s+)?(?:are\s+)?in:$")
LISTED = re.compile(r"\s+([A-Za-z_<][\w.<>]*)$")  # a bare function name, indented: one process's top function
HOST = re.compile(r"([\w][\w.@:/-]*)$")  # a listing's heading: the host or file the names under it came from
# what a line of a dump holds somewhere (its header, a frame's parenthesis, a failure, a fence, a group, a ps
# heading): a line with none of these, not indented, of several words, is prose or a log line, passed over at once
TOKENS = re.compile(
    r'\(|File "|Thread |Process |Python v|dump for PID|py-spy dump|Error: |Reason: |```| in:|PID|Fatal P'
)
PREFIX_ONLY = re.compile(r"\S+\s+\|\s*$")  # docker compose's prefix on an empty line: a blank line inside a stack
WRAP_LINES = 6  # the most lines a pasted command line is wrapped over
PS_LINE = re.compile(r"\s*(\d+) (.*)$")
PREFIXES = (
    re.compile(r"\S+\s+\|(?: |$)"),  # docker compose: "sglang-1  | "
    re.compile(r"\[(?:rank|default)(\d+)\]:\s?"),  # torchrun's --tee / log prefix
    re.compile(r"\([^()]*pid=\d+[^()]*\) "),  # Ray: "(LLMRayActor pid=1234) "
    re.compile(r"[\w.-]+: "),  # pdsh: "node017: "
)
# several processes' faulthandler output written at once: these pieces appear mid-line, more than once a line
GARBLE = re.compile(r'File "|File |, line |most recent call first|Thread 0x')
# user scripts often bear these names of the standard library: a relative ``test.py`` is the user's
NOT_STDLIB = frozenset({"test", "code", "trace", "profile", "token", "main"})


@dataclass
class _Thread:
    tid: str
    name: str | None
    active: bool | None
    line: int
    frames: list[Frame] = field(default_factory=list)


@dataclass
class _Process:
    label: str
    pid: int | None
    command: str | None
    line: int
    format: Format
    rank: int | None = None
    failed: str | None = None
    threads: list[_Thread] = field(default_factory=list)
    fatal: str | None = None
    wrapping: bool = False  # its command line goes on over the next lines until "Python v..."

    def done(self) -> DumpedProcess:
        threads = tuple(DumpedThread(t.tid, t.name, t.active, tuple(t.frames), t.line) for t in self.threads)
        return DumpedProcess(
            self.label,
            self.pid,
            self.command,
            threads,
            self.line,
            self.format,
            self.rank,
            self.failed,
            fatal=self.fatal,
        )


def frame(text: str) -> Frame | None:
    """One frame line of a py-spy dump (``func (file:line)``, or ``--native``'s ``func (library)``), unindented."""
    if not text.endswith(")") or " (" not in text:
        return None
    function, _, inside = text[:-1].rpartition(" (")
    if not function or not inside or "(" in inside:
        return None
    file, colon, line = inside.rpartition(":")
    if colon and line.isdigit():
        return Frame(function, file, int(line))
    if re.fullmatch(r"[^\s:]+", inside):  # the library a C/C++ frame is in: libc.so.6, ray/_raylet.so
        return Frame(function, inside, 0, native=True)
    return None


def _strip(line: str, seen: str | None = None) -> tuple[str, int | None, str | None]:
    """The line without a paste's prefix (where what follows reads as part of a dump, or the prefix is the one seen
    on the lines before: a frame wrapped over two lines), the rank a prefix says, and the prefix."""
    if _shape(line) or not line:
        return line, None, None
    for prefix in PREFIXES:
        found = prefix.match(line)
        if found is None:
            continue
        rest = line[found.end() :]
        if not rest.strip() or _shape(rest) or rest.lstrip().startswith('File "') or found.group(0) == seen:
            rank = int(found.group(1)) if found.groups() and found.group(1) else None
            return rest, rank, found.group(0)
    return line, None, None


def _shape(text: str) -> bool:
    """Whether a line reads as part of a dump: a header, a frame, a failed dump."""
    body = text.strip()
    if not body:
        return False
    return bool(
        PROCESS.match(body)
        or PYTHON.match(body)
        or THREAD.match(body)
        or FAULT_THREAD.match(body)
        or TRACEBACK.match(body)
        or FILE_FRAME.match(text)
        or ANNOUNCED.search(body)
        or FAILED.match(body)
        or FATAL.match(body)
        or (text[:1] in (" ", "\t") and frame(body) is not None)
    )


def garbled(lines: Iterable[str]) -> int:
    """How many lines hold pieces of several stack lines at once: several writers interleaved."""
    return sum(1 for line in lines if len(GARBLE.findall(line)) >= 3)


def read(lines: Iterable[str], source: str, first: int = 1) -> StackDump | None:
    """The stack dumps in a file's lines (``first``: the number of the first of them in the file), or None when they
    hold none."""
    raw = [line.rstrip() for line in lines]
    if garbled(raw) >= 3:
        return StackDump(
            source,
            (),
            "the stacks of several processes are interleaved character by character (they wrote to one stream at "
            "once): no frame can be given to a thread or a process",
        )
    processes: list[_Process] = []
    current: _Process | None = None
    thread: _Thread | None = None
    announced: int | None = None  # "Pyspy dump for PID N": the next process header, or the failure, is N's
    sharing: list[_Thread] = []  # "4 in:": the thread headers that share the next frames
    shared = 0
    listing: str | None = None  # a listing's heading, while indented bare names follow it
    listed = 0
    ps: dict[int, tuple[int, bool]] = {}  # a ps --forest listing: pid -> (indent of its name, exited)
    ps_order: list[int] = []
    in_ps = False
    prefix: str | None = None  # the last prefix stripped
    fatal: str | None = None  # "Fatal Python error: ...": the faulthandler dump that follows is a crash's

    def new(label: str, pid: int | None, command: str | None, at: int, fmt: Format, rank: int | None) -> _Process:
        nonlocal current, thread
        current = _Process(label, pid, command, at, fmt, rank)
        processes.append(current)
        thread = None
        return current

    for index, line in enumerate(raw, 1):
        number = index + first - 1
        quiet = not in_ps and not (current is not None and current.wrapping) and line[:1] not in (" ", "\t", "")
        if quiet and " " in line.strip() and not TOKENS.search(line) and not PREFIX_ONLY.match(line):  # prose
            thread = listing = None
            if current is not None and current.format != "py-spy":
                current = None
            continue
        text, rank, used = _strip(line, prefix)
        prefix = used or prefix
        body = text.strip()
        if body.startswith("```"):
            continue
        if in_ps:
            found = PS_LINE.match(text)
            if found and body:
                name = found.group(2)
                indent = len(name) - len(name.lstrip(" |\\_"))
                ps[int(found.group(1))] = (indent, "<defunct>" in name)
                ps_order.append(int(found.group(1)))
                continue
            in_ps = False
        if re.fullmatch(r"PID\s+(?:COMMAND|CMD)", body):
            in_ps = True
            continue
        if current is not None and current.wrapping:
            if PYTHON.match(body):
                current.wrapping = False
                continue
            # a terminal's hard wrap goes on for a few lines, up to the "Python v..." line
            if body and not THREAD.match(body) and number - current.line <= WRAP_LINES:
                current.command = f"{current.command or ''}{body}"
                continue
            current.wrapping = False
        if found := ANNOUNCED.search(body):
            announced = int(found.group(1) or found.group(2))
            listing = None
            continue
        if found := PROCESS.match(body):
            pid = int(found.group(1))
            command = found.group(2).strip()
            new(_label(pid, command), pid, command, number, "py-spy", rank).wrapping = True
            announced = None
            listing = None
            continue
        if found := FAILED.match(body):
            failed_pid: int | None = announced
            if failed_pid is None and current is not None and not current.threads:
                failed_pid = current.pid
            target = current if current is not None and failed_pid is not None and current.pid == failed_pid else None
            if target is None:
                label = f"PID {failed_pid}" if failed_pid is not None else "a process"
                target = new(label, failed_pid, None, number, "py-spy", rank)
            target.failed = found.group(1)
            announced = None
            continue
        if (found := REASON.match(body)) and current is not None and current.failed:
            current.failed = f"{current.failed}: {found.group(1)}"
            continue
        if found := GROUP.match(body):  # "4 in:": each header below is a process, and the frames below are theirs
            shared = int(found.group(1))
            sharing = []
            continue
        gdb = thread is not None and current is not None and current.format == "gdb"
        if gdb and text[:1] in (" ", "\t") and not FILE_FRAME.match(text):
            continue  # gdb prints each frame's source line (or a C call) under it
        if found := THREAD.match(body):
            fresh = current is None or current.format != "py-spy" or current.failed is not None
            if fresh or (rank is not None and current is not None and current.rank != rank):
                new("a process whose header is not in the paste", None, None, number, "py-spy", rank)
            assert current is not None
            name = found.group(3)
            if name == "MainThread" and any(
                t.name == "MainThread" for t in current.threads
            ):  # the next process, its header cut
                new("a process whose header is not in the paste", None, None, number, "py-spy", rank)
                assert current is not None
            thread = _Thread(found.group(1), name, found.group(2) != "idle", number)
            current.threads.append(thread)
            if shared:
                sharing.append(thread)
                if len(sharing) == shared:  # every header named: the frames below are theirs
                    shared = 0
            listing = None
            continue
        if found := FATAL.match(body):
            fatal = found.group(1)
            current = thread = None
            continue
        if body == NO_FRAME and thread is not None:
            continue
        if found := FAULT_THREAD.match(body):
            if current is None or current.format != "faulthandler" or (rank is not None and current.rank != rank):
                new("a process (faulthandler)", None, None, number, "faulthandler", rank).fatal = fatal
                fatal = None
            assert current is not None
            thread = _Thread(found.group(1), None, None, number)
            current.threads.append(thread)
            continue
        if TRACEBACK.match(body):
            new("a process (gdb py-bt)", None, None, number, "gdb", rank)
            assert current is not None
            thread = _Thread("gdb", None, None, number)
            current.threads.append(thread)
            continue
        file_frame = FILE_FRAME.match(text)
        if file_frame is None and body.startswith('File "') and index < len(raw):
            joined = text + _strip(raw[index], prefix)[0].strip()  # a frame wrapped over two lines
            if FILE_FRAME.match(joined):
                file_frame = FILE_FRAME.match(joined)
                raw[index] = ""
        if file_frame is not None:
            if thread is None or current is None or current.format not in ("faulthandler", "gdb"):
                thread = None  # a Python traceback (most recent call last) in a log: an error, not a dump
                continue
            thread.frames.append(Frame(file_frame["function"], file_frame["file"], int(file_frame["line"])))
            continue
        parsed = frame(body) if text[:1] in (" ", "\t") else None
        if parsed is not None and (thread is not None or not parsed.native):
            if thread is None or current is None:
                new("a process (frames without a header)", None, None, number, "frames", rank)
                assert current is not None
                thread = _Thread("?", None, None, number)
                current.threads.append(thread)
            if sharing and thread is sharing[-1] and not shared:
                for shares in sharing[:-1]:
                    shares.frames.append(parsed)
            thread.frames.append(parsed)
            continue
        if listing is not None and (found := LISTED.fullmatch(text)):
            listed += 1
            name = found.group(1)
            label = f"{listing} #{listed}"
            new(label, None, None, number, "listing", rank)
            assert current is not None
            current.threads.append(_Thread("?", None, None, number, [Frame(name, "", 0)]))
            thread = None
            continue
        if body and text[:1] not in (" ", "\t") and HOST.fullmatch(body) and _listing_follows(raw, index):
            listing, listed = body, 0
            current = thread = None
            continue
        if not body:
            continue  # a blank line (or a prefix alone) inside a stack: the stack goes on
        # prose, a command, a log line: the dump before it is over
        thread = None
        listing = None
        if current is not None and current.format != "py-spy":
            current = None
    name = source.rsplit("/", 1)[-1]
    if len(processes) == 1 and processes[0].pid is None:  # the file's one process: the file names it
        processes[0].label = f"the process dumped in {name}"
        if processes[0].rank is None and (named := RANK_IN_NAME.search(name)):
            processes[0].rank = int(named.group(1))
    done = [p.done() for p in processes if p.threads or p.failed]
    done = _merged(done)
    done = [dataclasses.replace(_with_children(p, ps, ps_order), source=source) for p in done]
    return StackDump(source, tuple(done)) if done else None


def _label(pid: int, command: str) -> str:
    title = command.split()[0] if command else ""
    if "::" in title or (title and "/" not in title and not title.startswith("python")):
        return f"PID {pid} ({title})"  # a process title: sglang::scheduler_TP6, ray::WorkerDict
    return f"PID {pid}"


def _listing_follows(raw: list[str], number: int) -> bool:
    """Whether the lines after a heading are indented bare names (a listing of top functions)."""
    after = raw[number : number + 2]
    return len(after) >= 1 and all(LISTED.fullmatch(_strip(line)[0]) for line in after if line.strip())


def _merged(processes: list[DumpedProcess]) -> list[DumpedProcess]:
    """A listing of top functions with the full stack of one of them pasted below it: the entry whose name is that
    stack's top function (the only one) gets the stack."""
    listed = [p for p in processes if p.format == "listing"]
    if not listed:
        return processes
    out = list(processes)
    for full in [p for p in processes if p.format != "listing" and p.pid is None]:
        main = full.main
        top = next((f.function for f in main.frames if not f.native), None) if main else None
        matching = [p for p in listed if p.threads[0].frames[0].function == top]
        if top is None or len(matching) != 1:
            continue
        entry = matching[0]
        out[out.index(entry)] = DumpedProcess(
            f"{entry.label} (its stack below, line {full.line})", None, None, full.threads, entry.line, "listing"
        )
        out.remove(full)
    return out


def _with_children(process: DumpedProcess, ps: dict[int, tuple[int, bool]], order: list[int]) -> DumpedProcess:
    """A process of a ``ps --forest`` listing beside the dump: its children and whether each has exited."""
    if process.pid is None or process.pid not in ps:
        return process
    indent = ps[process.pid][0]
    children: list[tuple[int, bool]] = []
    child_indent: int | None = None
    for pid in order[order.index(process.pid) + 1 :]:
        depth, exited = ps[pid]
        if depth <= indent:
            break
        child_indent = depth if child_indent is None else child_indent
        if depth == child_indent:
            children.append((pid, exited))
    return dataclasses.replace(process, children=tuple(children))
