"""Ask ranks through torch's control plane (``_WorkerServer``: HTTP on a unix socket) for their live Flight Recorder
and stacks. The server answers from its own thread, so a rank blocked in a collective still answers.

Where a rank serves: ``$NCCLCHECK_CONTROL_DIR/rank<N>.json`` (written by the hook ``ncclcheck run`` installs), or
the job's own ``TORCH_WORKER_SERVER_SOCKET``; both read from the rank's /proc/PID/environ.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ncclcheck.collectors.control_hook import CONTROL_DIR, GROUPS, GROUPS_FILE, THEIR_SOCKET, socket_path
from ncclcheck.collectors.control_hook_p2p import HANDLER as P2P_HANDLER
from ncclcheck.collectors.flight import parse, pg_ranks
from ncclcheck.model.args import PostedOps, posted_from_json
from ncclcheck.model.flight import FrDump, Unreadable

ANSWER_S = 1.0  # a rank whose server does not answer within this is named as not answering
RECORDERS = ("fr_trace_json", "dump_nccl_trace_json")  # torch's, in C++: safe to ask of a rank that is exiting
FLIGHT = (*RECORDERS, GROUPS)  # the recorders, and the groups they belong to (our handler, in Python)
HANDLERS = (*FLIGHT, "dump_traceback")
FILES = {  # where run keeps each handler's answer, per rank, in a hang's folder
    "fr_trace_json": "live_fr_rank{}.json",
    "dump_nccl_trace_json": "live_nccl_rank{}.json",
    GROUPS: "live_groups_rank{}.json",
    "dump_traceback": "live_stacks_rank{}.txt",
}
LIVE = re.compile(r"^live_(?:fr|nccl)_rank(\d+)\.json$")
MAX_ANSWER = 256 << 20


@dataclass(frozen=True)
class RankAnswer:
    """What one rank's control plane said: each handler's body (None: not answered), or why it could not be asked."""

    rank: int
    socket: str
    bodies: tuple[tuple[str, bytes | None], ...]
    error: str = ""  # "" when the rank answered at least one handler

    def body(self, handler: str) -> bytes | None:
        return dict(self.bodies).get(handler)


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def ask(path: str, handler: str, timeout: float = ANSWER_S) -> bytes:
    """One handler's answer, from a unix socket or (the job's own debug server) ``http://localhost:PORT``; raises
    OSError or http.client errors when the rank does not answer in time."""
    conn: http.client.HTTPConnection
    if path.startswith("http://"):
        host, _, port = path[len("http://") :].partition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    else:
        conn = _UnixHTTP(path, timeout)
    try:
        conn.request("POST", f"/handler/{handler}", body=b"", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        body = response.read(MAX_ANSWER)
        if response.status != 200:
            raise OSError(f"{handler}: HTTP {response.status}: {body[:200].decode(errors='replace')}")
        return body
    finally:
        conn.close()


def _ask_rank(rank: int, path: str, handlers: Sequence[str], timeout: float) -> RankAnswer:
    bodies: list[tuple[str, bytes | None]] = []
    errors: list[str] = []
    for handler in handlers:
        try:
            bodies.append((handler, ask(path, handler, timeout)))
        except (OSError, http.client.HTTPException) as exc:
            bodies.append((handler, None))
            errors.append(f"{handler}: {type(exc).__name__}: {exc}" if str(exc) else f"{handler}: {type(exc).__name__}")
            if isinstance(exc, (TimeoutError, ConnectionRefusedError, FileNotFoundError)):
                break  # the rank is not answering at all: do not spend another second per handler
    answered = any(b is not None for _, b in bodies)
    return RankAnswer(rank, path, tuple(bodies), "" if answered else "; ".join(errors) or "no answer")


def fetch(
    sockets: Mapping[int, str], handlers: Sequence[str] = HANDLERS, timeout: float = ANSWER_S
) -> list[RankAnswer]:
    """Every rank asked at once; each handler bounded by ``timeout`` (a rank that does not answer is not waited for)."""
    if not sockets:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(sockets))) as pool:
        futures = [pool.submit(_ask_rank, r, p, handlers, timeout) for r, p in sorted(sockets.items())]
        return [f.result() for f in futures]


def sockets_in(control_dir: str) -> dict[int, str]:
    """The sockets the hook recorded in ``control_dir`` (rank<N>.json), by global rank."""
    out: dict[int, str] = {}
    try:
        names = os.listdir(control_dir)
    except OSError:
        return out
    for name in names:
        if name.startswith("rank") and name.endswith(".json") and name[4:-5].isdigit():
            path = _recorded(os.path.join(control_dir, name))
            if path:
                out[int(name[4:-5])] = path
    return out


def _recorded(path: str, ours: bool = False) -> str | None:
    """Where the hook's record says the rank serves (``ours``: only where that is run's own server)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or (ours and data.get("owner") != "ncclcheck"):
        return None
    where = data.get("socket") or data.get("url")  # a url: the job's own debug server, on a TCP port
    return where if isinstance(where, str) and where else None


def socket_of(pid: int, ours: bool = False) -> str | None:
    """A rank's control socket from its environment (/proc/PID/environ): the job's own, or the one run's hook made
    (``ours``: only that one, as the hook's record says)."""
    env = environ(pid)
    control_dir, rank = env.get(CONTROL_DIR), env.get("RANK", "")
    record = os.path.join(control_dir, f"rank{rank}.json") if control_dir and rank.isdigit() else None
    recorded = _recorded(record, ours) if record else None
    if recorded or ours:
        return recorded  # the hook's record: ours, or the job's own (set by the job after its start, unseen here)
    if env.get(THEIR_SOCKET):
        return env[THEIR_SOCKET]
    return socket_path(control_dir, int(rank)) if control_dir and rank.isdigit() else None


def environ(pid: int) -> dict[str, str]:
    """A process's environment at its start ({} when it cannot be read: another user's, or gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            out[name.decode(errors="replace")] = value.decode(errors="replace")
    return out


def live_groups(pids: Mapping[int, int]) -> tuple[frozenset[int], ...]:
    """The job's process groups, each its members' global ranks, as the ranks (rank -> pid) wrote them to their
    control dir (``ncclcheck run``'s hook: ``groups-rank<N>.json``, each time a group is made); () when none did.
    Read from files, never asked of the ranks."""
    found: set[frozenset[int]] = set()
    for rank, pid in pids.items():
        raw = _published(pid, rank)
        try:
            found |= {frozenset(members) for _, members in pg_ranks(json.loads(raw))} if raw else set()
        except (TypeError, ValueError):
            continue
    return tuple(sorted(found, key=sorted))


def _published(pid: int, rank: int) -> bytes | None:
    """Rank ``rank``'s process groups as ``ncclcheck run``'s hook wrote them to its control dir
    (``groups-rank<N>.json``), raw; None where there is none."""
    control_dir = environ(pid).get(CONTROL_DIR)
    if not control_dir:
        return None
    try:
        with open(os.path.join(control_dir, GROUPS_FILE.format(rank)), "rb") as f:
            return f.read(MAX_ANSWER)
    except OSError:
        return None


def live_flight(pids: Mapping[int, int]) -> tuple[list[FrDump], list[Unreadable], dict[int, str]]:
    """The live Flight Recorder of every rank (rank -> pid) that has a control plane: the dumps, with their groups'
    members as the rank wrote them to its control dir, the answers that were not dumps, and the ranks that did not
    answer (with why). Ranks without a control socket are left out. Only torch's recorders are asked, in C++: a
    handler in Python asked of a rank that is exiting aborts it (``control_hook._closing``), and a job's own server
    (its debug server) does not close at exit as ours does."""
    sockets = {r: path for r, pid in pids.items() if (path := socket_of(pid)) and _there(path)}
    dumps, unreadable, silent = recorders(fetch(sockets, RECORDERS), lambda a, h: f"{a.socket}:{h}")
    joined = [_joined(d, _published(pids[d.rank], d.rank)) if d.rank in pids else d for d in dumps]
    return joined, unreadable, silent


def posted(pids: Mapping[int, int], timeout: float = 0.5) -> dict[int, PostedOps]:
    """The point-to-point ops each rank (rank -> pid) has posted, where ``ncclcheck run``'s hook records them; ranks
    without a control plane, or whose answer did not come, are left out. Only ranks that ``ncclcheck run``'s own
    server answers for are asked: the handler is in Python, and only ours closes before the rank's interpreter
    finalizes (``control_hook._closing``); asked through a job's own server as the rank exits, it would abort it."""
    sockets = {r: path for r, pid in pids.items() if (path := socket_of(pid, ours=True)) and _there(path)}
    out: dict[int, PostedOps] = {}
    for a in fetch(sockets, (P2P_HANDLER,), timeout) if sockets else []:
        body = a.body(P2P_HANDLER)
        try:
            found = posted_from_json(json.loads(body)) if body else None
        except ValueError:
            found = None
        if found is not None:
            out[a.rank] = found
    return out


def recorders(
    answers: Sequence[RankAnswer], name: Callable[[RankAnswer, str], str]
) -> tuple[list[FrDump], list[Unreadable], dict[int, str]]:
    """Every rank's Flight Recorder from what it answered (``name``: where a handler's answer is said to come from),
    the answers that were not dumps, and the ranks that did not answer (with why)."""
    dumps: list[FrDump] = []
    unreadable: list[Unreadable] = []
    silent: dict[int, str] = {}
    for a in answers:
        if a.error:
            silent[a.rank] = a.error
            continue
        found = recorder(a, {h: name(a, h) for h in FLIGHT})
        if isinstance(found, FrDump):
            dumps.append(found)
        else:
            unreadable += found
    return dumps, unreadable, silent


def recorder(answer: RankAnswer, names: Mapping[str, str]) -> FrDump | list[Unreadable]:
    """A rank's Flight Recorder from its answers (``names``: where each handler's answer is said to come from): the
    richer of its recorders, with its process groups' members from our handler; else why none could be read."""
    got = [parse(names[h], answer.rank, b) for h in FLIGHT[:2] if (b := answer.body(h)) is not None]
    best = max((d for d in got if isinstance(d, FrDump)), key=lambda d: len(d.entries), default=None)
    if best is None:
        return [u for u in got if isinstance(u, Unreadable)]
    return _joined(best, answer.body(GROUPS))


def _joined(dump: FrDump, groups: bytes | None) -> FrDump:
    """The recorder with its groups' members as our handler answered them (``groups``, its raw answer)."""
    try:
        members = pg_ranks(json.loads(groups)) if groups else ()
    except ValueError:
        members = ()
    return dataclasses.replace(dump, pg_ranks=members + dump.pg_ranks) if members else dump


def with_groups(dump: FrDump) -> FrDump:
    """A Flight Recorder run kept from a rank's control plane, with the members of its groups from the answer kept
    beside it (``live_groups_rank<N>.json``); any other dump as it is."""
    found = LIVE.match(os.path.basename(dump.file))
    if found is None:
        return dump
    try:
        with open(os.path.join(os.path.dirname(dump.file), FILES[GROUPS].format(found.group(1))), "rb") as f:
            return _joined(dump, f.read(MAX_ANSWER))
    except OSError:
        return dump


def _there(where: str) -> bool:
    return where.startswith("http://") or os.path.exists(where)
