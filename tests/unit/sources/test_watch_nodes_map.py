"""torchrun's map in a one-shot answer across nodes: the viewer waits for a read of it that is under way (it runs
in a thread, and under load it can outlast the watch window), and never for one that was not started."""

from __future__ import annotations

import threading

import pytest

from ncclcheck.model.watch import AgentReport, RendezvousEndpoint, RendezvousMap
from ncclcheck.sources import watch_nodes
from ncclcheck.sources.watch_nodes import JobMap

ENDPOINT = RendezvousEndpoint("node0", 29500, "none")


def report(rendezvous: RendezvousEndpoint | None) -> AgentReport:
    return AgentReport("node0", 0.0, 0, "j", 2, 1, True, 5.0, 3, (), rendezvous=rendezvous)


def test_a_read_under_way_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow_read(endpoint: RendezvousEndpoint, timeout_s: float = 3.0) -> RendezvousMap:
        release.wait(30)
        return RendezvousMap(endpoint.text(), endpoint.run_id, 1, ())

    monkeypatch.setattr(watch_nodes.rendezvous, "read", slow_read)
    job_map = JobMap()
    assert job_map.now({"node0": report(ENDPOINT)}, 0.0) is None  # the first read has only begun
    assert not job_map.wait_first(0.05)  # still under way: not ended while waited for
    threading.Timer(0.2, release.set).start()
    assert job_map.wait_first(30)
    shown = job_map.now({"node0": report(ENDPOINT)}, 0.0)
    assert shown is not None and shown.endpoint == "node0:29500" and shown.round == 1


def test_no_read_is_waited_for_where_no_agent_names_a_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(endpoint: RendezvousEndpoint, timeout_s: float = 3.0) -> RendezvousMap:
        raise AssertionError("no read should start")

    monkeypatch.setattr(watch_nodes.rendezvous, "read", never)
    job_map = JobMap()
    assert job_map.now({"node0": report(None)}, 0.0) is None
    assert not job_map.wait_first(30)  # nothing under way: returns at once
