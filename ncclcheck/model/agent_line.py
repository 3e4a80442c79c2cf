"""The agent line (schema ncclcheck.watch-agent/3), written and read in one place: ``watch --agent`` and ``run``'s
sampler write one per sample of a node's ranks (``AgentLines``), the viewer reads them back (``Held.read``).

A line holds each rank's sample and how long it has stood still (the agent tracks its own ranks on its own
clock, so the viewer never compares two nodes' clocks), and a rank's stack only when it changed since the
line before. A rank whose state (process, status, the call it is in and its arguments) is as last sent and whose
stack and closer look did not change comes as one positional row: its state's version (the line the state changed
in), the numbers that change at every sample (``NUMBERS``), its new rounds. The reader keeps the rest from the
rank's last full entry. A rank goes in full in the line its state changed and the ``REPEAT`` - 1 after it (a line
lost on its way, torn by a fan-out's interleaving, leaves no state gone by), and every rank on every
``TABLE_EVERY``-th line (a reader that came in late is whole after it); a row whose version the reader does not hold
reads as a rank whose stack is not known. Schema /2 sent every rank in full: still read.

A rank's new rounds of sampled stacks come as ``counts``: one row of plain numbers per round (its samples and
waits by kind, its CPU, and (index, count) pairs into the rank's ``places`` table), the table itself (kind, what,
call site) only when it changed, or every ``TABLE_EVERY`` lines for a reader that came in late. Schema /1 carried
each round as an object with its places spelt out (``rounds``): still read, for the files recorded with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ncclcheck.model.args import args_from_json, posted_from_json
from ncclcheck.model.flight import FrDump, dump_from_json, dump_to_json
from ncclcheck.model.shares import (
    PlaceKey,
    Tally,
    places_from_json,
    tally_from_json,
    tally_from_row,
    tally_row,
    window,
)
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import Deep, code_from_json, deep_from_json
from ncclcheck.model.watch import AGENT_SCHEMA, AgentReport, RankSample, RankView, RendezvousEndpoint, WatchState

TABLE_EVERY = 32  # lines between two sendings of an unchanged place table or state (a reader that began later)
REPEAT = 3  # lines that carry a rank in full once its state changed
PLACE_TABLE_MAX = 64  # places a rank's table holds before it is begun afresh
# a rank's numbers that change at every sample, in the order of its positional row (after its rank; then its rounds)
NUMBERS = (
    "since_s",
    "still_s",
    "quiet_s",
    "idle_s",
    "idle_samples",
    "moved_samples",
    "progressing",
    "cpu_percent",
    "main_cpu_percent",
    "rss_bytes",
    "threads",
    "socket_bytes",
    "held_s",
)
SENT_APART = frozenset({"stack", "deep", "counts", "places", "rounds"})  # each sent when it changed, on its own


def agent_line(
    state: WatchState | None,
    host: str,
    sent: dict[int, tuple[Frame, ...]],
    now: float,
    seq: int,
    error: str | None = None,
    done: str | None = None,
    rendezvous: RendezvousEndpoint | None = None,
    interval_s: float | None = None,
    flight: Sequence[FrDump] | None = None,
    rounds_sent: dict[int, float] | None = None,
    deep_sent: dict[int, Deep | None] | None = None,
    places_sent: dict[int, tuple[tuple[PlaceKey, ...], int]] | None = None,
    groups: Sequence[frozenset[int]] | None = None,
) -> dict[str, Any]:
    """The line for this sample; ``sent`` (each rank's stack as last sent) is brought up to date. ``flight``: this
    node's ranks' live Flight Recorders, given when they changed (an empty one: the stall they were asked in is over).
    ``rounds_sent``: the end of each rank's last round sent, brought up to date (None: send every round held);
    ``deep_sent``: each rank's closer look as last sent, brought up to date: a look is sent when it changed (``null``
    once the rank moved on), not at every line (None: with every line that has one). ``places_sent``: each rank's
    place table as last sent, and the line it went with (None: the table goes with every line that has rounds).
    ``groups``: the job's process groups as this node's ranks wrote them, given when they changed."""
    line: dict[str, Any] = {"schema": AGENT_SCHEMA, "host": host, "time": round(now, 3), "seq": seq}
    if interval_s is not None:
        line["interval_s"] = interval_s  # how often this agent writes: the viewer calls it silent after 4 of them
    if error is not None:
        line["error"] = error
    if state is None:
        line["ranks"] = []
        if done:
            line["done"] = done
        return line
    job = state.job
    node_ranks = {p.group_rank for p in job.ranks if p.group_rank is not None}  # torchrun's GROUP_RANK: the node's
    line.update(
        node_rank=node_ranks.pop() if len(node_ranks) == 1 else None,
        job={
            "id": job.id,
            "world_size": job.world_size,
            "nodes": job.nodes,
            "launcher_pid": job.launcher_pid,
            "script": job.script,
            "launcher_running": state.launcher_running,
        },
        rendezvous=None
        if rendezvous is None
        else {"endpoint": rendezvous.text(), "address": rendezvous.address, "run_id": rendezvous.run_id},
        window_s=round(state.window_s, 2),
        samples=state.samples,
        ranks=[],
        notes=list(state.notes),
        recording=state.recording,
    )
    for v in state.ranks:
        s = v.sample
        rank: dict[str, Any] = {
            "rank": s.rank,
            "local_rank": s.local_rank,
            "pid": s.pid,
            "status": s.status,
            "tracer": s.tracer,
            "exit_code": s.exit_code,
            "cpu_percent": s.cpu_percent,
            "rss_bytes": s.rss_bytes,
            "threads": s.threads,
            "socket_bytes": s.net_bytes,
            "stack_error": s.stack_error,
            "collective": v.collective,
            "call_site": v.call_site,
            "doing": v.doing,
            "since_s": round(v.since_s, 2),
            "still_s": round(v.still_s, 2),
            "quiet_s": round(v.quiet_s, 2),
            "idle_s": round(v.idle_s, 2),
            "idle_samples": v.idle_samples,
            "moved_samples": v.moved_samples,
            "progressing": v.progressing,
            "main_cpu_percent": None if v.main_cpu_percent is None else round(v.main_cpu_percent, 1),
            "held_s": round(v.held_s, 2),
        }
        if v.args is not None:
            rank["args"] = v.args.to_json()
        if deep_sent is None:  # a rank standing still outside a collective: what it waits on, for the viewer's chain
            if s.deep is not None:
                rank["deep"] = s.deep.to_json()
        elif s.rank not in deep_sent or deep_sent[s.rank] != s.deep:  # not sent yet, or due again: null too
            rank["deep"] = None if s.deep is None else s.deep.to_json()
            deep_sent[s.rank] = s.deep
        if s.p2p is not None:
            rank["p2p"] = s.p2p.to_json()
        if s.ended is not None:
            rank["ended"] = round(s.ended, 3)
        if s.code is not None:
            rank["code"] = s.code.to_json()
        if sent.get(s.rank) != s.stack:
            rank["stack"] = [[f.function, f.filename, f.line, f.native] for f in s.stack]
            sent[s.rank] = s.stack
        last = rounds_sent.get(s.rank, float("-inf")) if rounds_sent is not None else float("-inf")
        new = [t for t in v.tallies if t.end > last]
        if new:
            rank.update(_counts(new, s.rank, seq, places_sent))
            if rounds_sent is not None:
                rounds_sent[s.rank] = new[-1].end
        line["ranks"].append(rank)
    if flight is not None:
        line["flight"] = [dump_to_json(d) for d in flight]
    if groups is not None:
        line["groups"] = [sorted(g) for g in groups]
    if done:
        line["done"] = done
    return line


class AgentLines:
    """A node's agent lines, one after another: what each carries from the one before (each rank's stack, rounds,
    closer look and place table as last written, the Flight Recorders and groups last written, the line's number),
    so that a line carries only what changed. Used by ``watch --agent`` and ``run``'s sampler alike."""

    def __init__(self, host: str, rendezvous: RendezvousEndpoint | None = None) -> None:
        self.host, self.seq, self.rendezvous = host, 0, rendezvous
        self.sent: dict[int, tuple[Frame, ...]] = {}
        self.flight: object = ()
        self.groups: tuple[frozenset[int], ...] = ()
        self.rounds_sent: dict[int, float] = {}
        self.deep_sent: dict[int, Deep | None] = {}
        self.places_sent: dict[int, tuple[tuple[PlaceKey, ...], int]] = {}
        # each rank's state as last sent in full, and its version: the line it changed in
        self.states: dict[int, tuple[dict[str, Any], int]] = {}

    def line(
        self,
        state: WatchState | None,
        now: float,
        interval_s: float | None = None,
        flight: tuple[FrDump, ...] = (),
        groups: tuple[frozenset[int], ...] = (),
        done: str | None = None,
        error: str | None = None,
    ) -> dict[str, Any]:
        """The next line; ``flight`` is sent when it is not the one last sent (identity: the source keeps one until
        it asks again), ``groups`` when they differ from those last sent."""
        for rank, (_, version) in self.states.items():  # a rank due in full: with its stack and closer look too
            if _in_full(self.seq, version):
                self.sent.pop(rank, None)
                self.deep_sent.pop(rank, None)
        fresh, self.flight = (flight if flight is not self.flight else None), flight
        new_groups, self.groups = (groups if groups != self.groups else None), groups
        line = agent_line(
            state,
            self.host,
            self.sent,
            now,
            self.seq,
            error=error,
            done=done,
            rendezvous=self.rendezvous,
            interval_s=interval_s,
            flight=fresh,
            rounds_sent=self.rounds_sent,
            deep_sent=self.deep_sent,
            places_sent=self.places_sent,
            groups=new_groups,
        )
        line["ranks"] = [self._compact(r, self.seq) for r in line["ranks"]]
        self.seq += 1
        return line

    def _compact(self, rank: dict[str, Any], seq: int) -> dict[str, Any] | list[Any]:
        """The rank in full, with its state's version, in the line its state changed and the ``REPEAT`` - 1 after
        it (one line lost on its way, a torn line, does not leave the reader with a state gone by), on every
        ``TABLE_EVERY``-th line (every rank at once: a reader that came in late is whole after it) and where it
        carries something sent apart that a row has no place for; else its positional row: its rank, its state's
        version (a reader that missed it knows), its numbers, its new rounds."""
        state = {k: v for k, v in rank.items() if k not in NUMBERS and k not in SENT_APART}
        kept = self.states.get(rank["rank"])
        version = kept[1] if kept is not None and kept[0] == state else seq
        self.states[rank["rank"]] = (state, version)
        if not _in_full(seq, version) and not _apart(rank):
            return [rank["rank"], version, *(rank[k] for k in NUMBERS), *rank.get("counts", ())]
        return {**rank, "version": version}


def _in_full(seq: int, version: int) -> bool:
    """Whether line ``seq`` carries a rank whose state changed in line ``version`` in full: in that line and the
    ``REPEAT`` - 1 after it, and on every ``TABLE_EVERY``-th line."""
    return seq - version < REPEAT or seq % TABLE_EVERY == 0


def _apart(rank: dict[str, Any]) -> bool:
    """Whether the rank carries something sent apart that a row has no place for (all but its new rounds)."""
    return any(k in rank for k in SENT_APART if k != "counts")


def _counts(
    new: Sequence[Tally], rank: int, seq: int, places_sent: dict[int, tuple[tuple[PlaceKey, ...], int]] | None
) -> dict[str, Any]:
    """A rank's new rounds as rows of numbers, and its place table where the reader does not hold it yet."""
    keys = places_sent.get(rank, ((), seq))[0] if places_sent is not None else ()
    table = {k: i for i, k in enumerate(keys)} if len(keys) <= PLACE_TABLE_MAX else {}  # a fresh one past it
    out: dict[str, Any] = {"counts": [tally_row(t, table) for t in new]}
    fresh = tuple(table)
    if places_sent is None or rank not in places_sent or fresh != keys or seq % TABLE_EVERY == 0:
        out["places"] = [list(k) for k in fresh]
        if places_sent is not None:
            places_sent[rank] = (fresh, seq)
    return out


@dataclass
class Held:
    """What a viewer holds of the agents' lines from one line to the next, per node and rank: its stack, its minute
    of rounds, its closer look and its place table as last sent, and its view as last read (a rank sent as a row
    of numbers keeps the rest from it)."""

    stacks: dict[tuple[str, int], tuple[Frame, ...]] = field(default_factory=dict)
    tallies: dict[tuple[str, int], tuple[Tally, ...]] = field(default_factory=dict)
    deeps: dict[tuple[str, int], Deep | None] = field(default_factory=dict)
    places: dict[tuple[str, int], tuple[PlaceKey, ...]] = field(default_factory=dict)
    views: dict[tuple[str, int], RankView] = field(default_factory=dict)
    versions: dict[tuple[str, int], int] = field(default_factory=dict)  # the version of each rank's state held

    def read(self, data: dict[str, Any], received: float) -> AgentReport | None:
        """An agent line as the viewer holds it: a rank's stack comes from an earlier line when this one left it
        out (unchanged), its rounds of sampled stacks are added to those of earlier lines, read with its place
        table as last sent; a rank sent as a row of numbers is its last view with them. None: a line this version
        cannot read, or one with a rank in a row whose full entry never came (a reader that came in late: the
        agent sends every rank in full again within ``TABLE_EVERY`` lines)."""
        host = str(data["host"])
        raw_job = data.get("job")
        job: dict[str, Any] = raw_job if isinstance(raw_job, dict) else {}
        try:
            read = [self._row(r, host) if isinstance(r, list) else self._view(r, host) for r in data.get("ranks", [])]
            views = tuple(v for v in read if v is not None)
            if len(views) < len(read):
                return None  # a row whose state never came here: the rank's full entries in this line are kept
            return AgentReport(
                host=host,
                received=float(data.get("time", received)) if received < 0 else received,
                node_rank=_int(data.get("node_rank")),
                job_id=job.get("id"),
                world_size=_int(job.get("world_size")),
                nodes=_int(job.get("nodes")),
                launcher_running=job.get("launcher_running"),
                window_s=float(data.get("window_s", 0.0)),
                samples=int(data.get("samples", 0)),
                views=views,
                notes=tuple(str(n) for n in data.get("notes", [])),
                error=data.get("error"),
                done=data.get("done"),
                rendezvous=_endpoint(data.get("rendezvous")),
                interval_s=_float(data.get("interval_s")),
                recording=bool(data.get("recording")),
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    def _view(self, r: dict[str, Any], host: str) -> RankView:
        rank = int(r["rank"])
        key = (host, rank)
        if "deep" in r:  # sent when it changed; null once the rank moved on
            self.deeps[key] = deep_from_json(r["deep"])
        self._rounds(_rounds(r, self.places, key), key)
        if "stack" in r:
            self.stacks[key] = tuple(Frame(str(f[0]), str(f[1]), int(f[2]), bool(f[3])) for f in r["stack"])
        sample = RankSample(
            rank=rank,
            local_rank=_int(r.get("local_rank")),
            pid=_int(r.get("pid")),
            host=host,
            status=str(r["status"]),
            cpu_percent=float(r.get("cpu_percent") or 0.0),
            rss_bytes=int(r.get("rss_bytes") or 0),
            threads=int(r.get("threads") or 0),
            main_cpu_s=None,
            net_bytes=_int(r.get("socket_bytes")),
            stack=self.stacks.get(key, ()),
            stack_error=r.get("stack_error"),
            exit_code=_int(r.get("exit_code")),
            deep=self.deeps.get(key),
            p2p=posted_from_json(r.get("p2p")),
            ended=_float(r.get("ended")),
            code=code_from_json(r.get("code")),
            tracer=r.get("tracer"),
        )
        cpu = r.get("main_cpu_percent")
        self.versions[key] = _int(r.get("version")) or 0
        view = self.views[key] = RankView(
            sample,
            r.get("collective"),
            r.get("call_site"),
            str(r.get("doing") or sample.status),
            since_s=float(r["since_s"]),
            still_s=float(r["still_s"]),
            quiet_s=float(r["quiet_s"]),
            idle_s=float(r["idle_s"]),
            idle_samples=int(r.get("idle_samples", 0)),
            main_cpu_percent=None if cpu is None else float(cpu),
            progressing=bool(r.get("progressing")),
            moved_samples=int(r.get("moved_samples", 0)),
            args=args_from_json(r.get("args")),
            tallies=self.tallies.get(key, ()),
            held_s=float(r.get("held_s") or 0.0),
        )
        return view

    def _row(self, r: list[Any], host: str) -> RankView | None:
        """A rank sent as a row (its state's version, ``NUMBERS``, then its new rounds): its last view, with these
        numbers; None where its state never came here. Where the state held is not the version the row names (the
        line that changed it was not read here), its stack and call are not known until its next full entry."""
        rank, version, since, still, quiet, idle, idle_n, moved, progressing, cpu, main_cpu, rss, threads, net, held = (
            r[:ROW]
        )
        key = (host, int(rank))
        before = self.views.get(key)
        if before is None:
            return None
        if len(r) > ROW:
            table = self.places.get(key, ())
            self._rounds([tally_from_row(row, table) for row in r[ROW:]], key)
        s = before.sample
        known = self.versions.get(key) == version
        sample = RankSample(
            s.rank,
            s.local_rank,
            s.pid,
            host,
            s.status,
            float(cpu or 0.0),
            int(rss or 0),
            int(threads or 0),
            None,
            _int(net),
            s.stack if known else (),
            s.stack_error if known else MISSED,
            s.exit_code,
            None,
            (),
            s.deep if known else None,
            s.p2p if known else None,
            s.ended,
            s.code if known else None,
            s.tracer,
        )
        view = self.views[key] = RankView(
            sample,
            before.collective if known else None,
            before.call_site if known else None,
            before.doing if known else s.status,
            float(since),
            float(still),
            float(quiet),
            float(idle),
            int(idle_n),
            None if main_cpu is None else float(main_cpu),
            bool(progressing),
            int(moved),
            (),
            before.args if known else None,
            self.tallies.get(key, ()),
            float(held or 0.0),
        )
        return view

    def _rounds(self, new: list[Tally | None] | None, key: tuple[str, int]) -> None:
        if new is not None:
            self.tallies[key] = window(self.tallies.get(key, ()), [t for t in new if t is not None])


ROW = 2 + len(NUMBERS)  # a rank's row: its rank, its state's version and its numbers, then its new rounds
MISSED = (
    "its state came in an agent line not read here (a torn or lost line): not known until the agent sends the rank in"
    f" full again, within {TABLE_EVERY} lines"
)


def _endpoint(data: object) -> RendezvousEndpoint | None:
    """The agent's torchrun's c10d rendezvous endpoint, as the agent reported it."""
    if not isinstance(data, dict):
        return None
    host, _, port = str(data.get("endpoint", "")).rpartition(":")
    if not host or not port.isdigit():
        return None
    address = data.get("address")
    return RendezvousEndpoint(
        host, int(port), str(data.get("run_id") or "none"), address if isinstance(address, str) else None
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rounds(
    r: dict[str, Any], tables: dict[tuple[str, int], tuple[PlaceKey, ...]], key: tuple[str, int]
) -> list[Tally | None] | None:
    """A rank's new rounds on the line: rows of numbers (/2, read with the rank's place table) or objects (/1)."""
    if "places" in r:
        table = places_from_json(r["places"])
        if table is not None:
            tables[key] = table
    if isinstance(r.get("counts"), list):
        table = tables.get(key, ())
        return [tally_from_row(row, table) for row in r["counts"]]
    if isinstance(r.get("rounds"), list):
        return [tally_from_json(t) for t in r["rounds"]]
    return None


def groups_from_json(data: dict[str, Any]) -> tuple[frozenset[int], ...] | None:
    """The job's process groups an agent line carries (each its members' global ranks); None where the line has
    none (unchanged since the last) or they cannot be read."""
    raw = data.get("groups")
    if not isinstance(raw, list):
        return None
    out: set[frozenset[int]] = set()
    for members in raw:
        if not isinstance(members, list) or not members:
            return None
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in members):
            return None
        out.add(frozenset(members))
    return tuple(sorted(out, key=sorted))


def flight_from_json(data: dict[str, Any]) -> tuple[FrDump, ...] | None:
    """The line's live Flight Recorders, when it carries them (None: unchanged since the line before)."""
    if not isinstance(data.get("flight"), list):
        return None
    dumps = (dump_from_json(d) for d in data["flight"])
    return tuple(d for d in dumps if d is not None)
