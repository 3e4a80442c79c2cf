"""Agent lines of hand-built node states, fed to the job-wide merge: the agents' tests and the TUI's."""

from __future__ import annotations

import json
from typing import Any

from watch_states import all_in, job, states

from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.collectors.agent_streams import Streams
from ncclcheck.model.agent_line import agent_line
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import WatchState

NOW = 1_800_000_000.0


def node_state(node: int, **odd: Any) -> WatchState:
    """Node ``node`` of a 2-node, 4-rank job: its two ranks in all_reduce for 12 s, but for ``odd``."""
    j = job(4, 2, node)
    first = 2 * node
    rounds = [all_in(first + 2, "all_reduce", first=first, **odd) for _ in range(4)]
    return states(j, *rounds, every=4.0, stall=10.0)


def lines_of(state: WatchState, host: str, times: int = 1, at: float = NOW) -> list[str]:
    sent: dict[int, tuple[Frame, ...]] = {}
    return [json.dumps(agent_line(state, host, sent, at + i, i)) for i in range(times)]


def merged(streams: Streams, now: float = NOW + 1, started: bool = True, nodes: int | None = None) -> WatchState:
    return merge(streams.reports, streams.text, now, Judging(10.0), 1.5, started, nodes)


def feed(*pairs: tuple[WatchState, str], received: float = NOW) -> Streams:
    streams = Streams()
    for state, host in pairs:
        for line in lines_of(state, host):
            streams.add_line(f"{host}: {line}\n", received)
    return streams
