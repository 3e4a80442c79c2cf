"""The data source of a multi-node ``watch``: agents started on every node through SLURM or the user's own
fan-out tool (or lines collected before), merged into one job-wide state at each poll (collectors/agent_commands starts them)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping

from ncclcheck.analysis.watch.flight import asked_for, exact, with_exact
from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.analysis.watch.nodes import SILENT_INTERVALS, SILENT_MIN_S, merge
from ncclcheck.collectors import rendezvous
from ncclcheck.collectors.agent_streams import FanOut, Streams, replay
from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FrDump
from ncclcheck.model.watch import AgentReport, RendezvousEndpoint, RendezvousMap, RendezvousNode, Verdict, WatchState

RDZV_EVERY_S = 5.0  # as often as torchrun's agents beat; one small read adds nothing to the store's load
FIRST_MAP_S = 15.0  # the store's own timeout (3 s) and torch's import in the reading thread, on a loaded node


class NodesSource:
    """Each ``poll`` merges the latest line of every node's agent; ``close`` ends the fan-out."""

    def __init__(
        self,
        stall_s: float,
        interval_s: float,
        fanout: FanOut | None = None,
        recorded: Streams | None = None,
        expected_hosts: tuple[str, ...] = (),
    ) -> None:
        self.judging, self.interval_s = Judging(stall_s), interval_s
        self.fanout, self.recorded, self.expected_hosts = fanout, recorded, expected_hosts
        self.begun = time.monotonic()
        self.state: WatchState | None = None
        self.map = JobMap()
        self.judged: tuple[tuple[FrDump, ...], tuple[Finding, ...]] = ((), ())  # the recorders last judged, and how

    @classmethod
    def from_file(cls, path: str, stall_s: float, interval_s: float) -> NodesSource:
        return cls(stall_s, interval_s, recorded=replay(path))

    def poll(self, final: bool = False) -> WatchState:
        judging = Judging(self.judging.stall_s, final)
        if self.fanout is not None:
            with self.fanout.lock:
                reports, text = (
                    dict(self.fanout.streams.reports),
                    {k: list(v) for k, v in self.fanout.streams.text.items()},
                )
            now = time.time()
            grace = max(SILENT_MIN_S, SILENT_INTERVALS * self.interval_s)
            started = final or time.monotonic() - self.begun > grace or not self.fanout.running()
        else:
            assert self.recorded is not None
            reports, text = self.recorded.reports, {k: list(v) for k, v in self.recorded.text.items()}
            now = max((r.received for r in reports.values()), default=0.0)
            started = True
        known = self.map.now(reports, now) if self.fanout is not None else None
        groups = {g for r in reports.values() for g in r.groups}  # each node's ranks wrote the groups they are in
        judging = dataclasses.replace(judging, groups=tuple(sorted(groups, key=sorted)))
        state = merge(
            reports,
            text,
            now,
            judging,
            self.interval_s,
            started,
            len(self.expected_hosts) or None,
            known,
            self.expected_hosts,
        )
        if not started and (not reports or any(n.agent == "missing" for n in state.nodes)):
            heard = sum(1 for n in state.nodes if n.agent != "missing")
            waiting = f"… starting the agents: {heard}{f'/{len(state.nodes)}' if state.nodes else ''} nodes reporting"
            state = WatchState(
                state.time,
                state.job,
                state.ranks,
                state.findings,
                Verdict("pending", waiting),
                state.window_s,
                state.samples,
                state.notes,
                state.launcher_running,
                state.nodes,
            )
        self.state = self._with_flight(state, reports)
        return self.state

    def _with_flight(self, state: WatchState, reports: Mapping[str, AgentReport]) -> WatchState:
        """Every node's live Flight Recorders (each agent sends its ranks' on a stall), judged together: where they
        name another rank than the stacks' vote, theirs is the word."""
        dumps = tuple(d for r in reports.values() for d in r.flight)
        if not dumps or not asked_for(state, self.judging.threshold(state.window_s)):
            return state
        if dumps != self.judged[0]:
            self.judged = (dumps, exact(dumps))
        return with_exact(state, self.judged[1])

    def with_map(self) -> bool:
        """Wait (at most FIRST_MAP_S) for torchrun's map where a read of it is under way and none has come yet, so
        that a one-shot answer carries it; whether a map came by waiting (then poll again)."""
        return self.map.wait_first(FIRST_MAP_S)

    def ended(self) -> bool:
        """Nothing more will come: the fan-out ended (or the lines were recorded)."""
        return self.fanout is None or not self.fanout.running()

    def close(self) -> None:
        if self.fanout is not None:
            self.fanout.close()


class JobMap:
    """torchrun's own map of the job, read in the background every RDZV_EVERY_S from the c10d rendezvous an
    agent's launcher names (a read never delays a refresh). A node the other torchruns dropped from the map (its
    heartbeat stopped) is remembered, with its last heartbeat, so that the view can still name it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latest: RendezvousMap | None = None
        self.beats: dict[int, tuple[RendezvousNode, float | None]] = {}  # node rank: node, last beat (epoch)
        self.reading = False
        self.read_at = -RDZV_EVERY_S
        self.first = threading.Event()  # set once a read has ended (with a map or an error)

    def now(self, reports: Mapping[str, AgentReport], now: float) -> RendezvousMap | None:
        """The map as of ``now`` (heartbeat ages counted to it); None when no agent names a c10d rendezvous."""
        endpoint = next(
            (
                r.rendezvous
                for r in sorted(reports.values(), key=lambda r: (r.node_rank is None, r.node_rank or 0))
                if r.rendezvous is not None
            ),
            None,
        )
        if endpoint is None:
            return None
        with self.lock:
            if not self.reading and time.monotonic() - self.read_at >= RDZV_EVERY_S:
                self.reading, self.read_at = True, time.monotonic()
                threading.Thread(target=self._read, args=(endpoint,), daemon=True, name="rendezvous").start()
            latest, beats = self.latest, dict(self.beats)
        if latest is None:
            return None
        present = {n.node_rank for n in latest.nodes}
        nodes = tuple(
            RendezvousNode(
                node.addr,
                rank,
                node.agent_pid,
                None if beat is None else max(now - beat, 0.0),
                removed=latest.error is None and rank not in present,
            )
            for rank, (node, beat) in sorted(beats.items())
        )
        return RendezvousMap(latest.endpoint, latest.run_id, latest.round, nodes, latest.error)

    def wait_first(self, timeout_s: float) -> bool:
        """Wait for the first read where one is under way; whether it ended while waited for."""
        with self.lock:
            pending = self.reading and not self.first.is_set()
        return pending and self.first.wait(timeout_s)

    def _read(self, endpoint: RendezvousEndpoint) -> None:
        got = rendezvous.read(endpoint)
        read_at = time.time()
        with self.lock:
            self.latest, self.reading = got, False
            self.first.set()
            if got.error is None:
                for node in got.nodes:
                    beat = None if node.heartbeat_age_s is None else read_at - node.heartbeat_age_s
                    self.beats[node.node_rank] = (node, beat)
