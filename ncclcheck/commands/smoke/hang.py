"""A smoke hang: py-spy dumps of this node's ranks, and (several nodes) the exchange through the rendezvous store.

Nodes > 0 post their diagnosis on the store node 0's torchrun serves and keep their ranks until node 0
says it gathered; node 0 connects before its own (slower) dumps, while its torchrun surely still runs.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from ncclcheck.analysis.smoke.progress import diagnose, merge
from ncclcheck.collectors import hang_exchange
from ncclcheck.collectors.processes import process_state
from ncclcheck.collectors.pyspy import dump_all
from ncclcheck.model.smoke import Hang, HangSample, Launch, RankProgress
from ncclcheck.views.smoke import hang_json

GATHER_S = 8.0
SEEN_S = 30.0  # py-spy's own timeout is 10 s a dump
AWAIT_GATHER_S = SEEN_S + 30.0  # node 0's own dumps, then its wait for the others

Link = tuple[Any | None, str | None]


def announce(launch: Launch) -> Link:
    """Before the dumps: nodes > 0 say on the store that they saw the hang; node 0 connects to it."""
    if launch.nodes == 1 or not launch.master_addr or launch.master_port is None:
        return None, None
    if launch.node_rank == 0:
        return hang_exchange.connect(launch.master_addr, launch.master_port), None
    return hang_exchange.announce(launch.master_addr, launch.master_port, launch.node_rank)


def dump_ranks(ranks: tuple[RankProgress, ...], launch: Launch, console: Console) -> Hang:
    console.print("watchdog: no progress past the deadline; taking py-spy dumps of the local ranks", style="yellow")
    dumps = dump_all([r.pid for r in ranks if r.pid])
    samples = {
        r.rank: HangSample(r.rank, r.pid, process_state(r.pid), *dumps.get(r.pid or -1, ((), "no pid"))) for r in ranks
    }
    hang = diagnose(ranks, samples, launch.world_size)
    with open(os.path.join(launch.log_dir, "hang-dumps.txt"), "w", encoding="utf-8") as handle:
        for state in hang.ranks:
            handle.write(f"rank {state.rank} ({state.state}):\n" + "".join(f"  {line}\n" for line in state.stack))
    return hang


def exchange(hang: Hang, link: Link, launch: Launch, console: Console) -> Hang:
    """Several nodes: post ours (nodes > 0) or gather the others' into the job's diagnosis (node 0)."""
    if launch.nodes == 1 or not launch.master_addr or launch.master_port is None:
        return hang
    addr, port = launch.master_addr, launch.master_port
    if launch.node_rank > 0:
        store, why = link
        if store is not None:
            why = hang_exchange.post(store, addr, port, launch.node_rank, hang_json(hang))
        if why or store is None:
            console.print(f"watchdog: {why}; node 0's report lacks this node's ranks", style="yellow")
        elif not hang_exchange.await_gathered(store, AWAIT_GATHER_S):
            console.print("watchdog: node 0 did not confirm it gathered this node's diagnosis", style="yellow")
        return hang
    store = link[0]
    posted = hang_exchange.gather(store, launch.nodes, GATHER_S, SEEN_S) if store is not None else {}
    silent = [node for node in range(1, launch.nodes) if node not in posted]
    if store is None:
        console.print(
            f"watchdog: the rendezvous store {addr}:{port} could not be reached;"
            " the other nodes' diagnoses are in their own reports",
            style="yellow",
        )
    elif silent:
        console.print(
            f"watchdog: node(s) {', '.join(map(str, silent))} posted no diagnosis"
            f" (waited {GATHER_S:.0f} s, {SEEN_S:.0f} s for a node that saw the hang); see their own reports",
            style="yellow",
        )
    remote = [h for h in map(hang_exchange.hang_from_json, posted.values()) if h is not None]
    return merge(hang, remote, launch.world_size)
