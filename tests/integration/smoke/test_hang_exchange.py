"""The multi-node hang exchange over a real c10d TCPStore: post, announce, gather."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from ncclcheck.collectors import hang_exchange

pytestmark = pytest.mark.integration

DIAGNOSIS = {"op": "all_reduce", "bytes": 8, "culprits": [3], "ranks": {"3": {"state": "not_in_collective"}}}


@pytest.fixture
def store_port() -> Any:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    yield server.port
    del server


def test_a_node_that_saw_the_hang_is_waited_for_past_the_first_window(store_port: int) -> None:
    # Node 1 says it saw the hang, then its dumps take longer than node 0's first window.
    store, why = hang_exchange.announce("127.0.0.1", store_port, 1)
    assert store is not None and why is None

    def late_post() -> None:
        time.sleep(1.5)
        assert hang_exchange.post(store, "127.0.0.1", store_port, 1, DIAGNOSIS) is None

    poster = threading.Thread(target=late_post)
    poster.start()
    found = hang_exchange.gather(hang_exchange.connect("127.0.0.1", store_port), 2, wait_s=0.3, seen_wait_s=60.0)
    poster.join()
    assert found == {1: DIAGNOSIS}
    assert hang_exchange.hang_from_json(found[1]) is not None


def test_a_node_that_never_saw_the_hang_is_not_waited_for_long(store_port: int) -> None:
    node2 = hang_exchange.announce("127.0.0.1", store_port, 2)[0]
    assert hang_exchange.post(node2, "127.0.0.1", store_port, 2, DIAGNOSIS) is None
    # Node 1 never announces: the gather returns node 2's diagnosis after the first window, not the long one.
    found: dict[int, Any] = {}
    gatherer = threading.Thread(
        target=lambda: found.update(
            hang_exchange.gather(hang_exchange.connect("127.0.0.1", store_port), 3, wait_s=0.3, seen_wait_s=3600.0)
        ),
        daemon=True,
    )
    gatherer.start()
    gatherer.join(timeout=120)
    assert not gatherer.is_alive(), "waited for a node that never saw the hang"
    assert found == {2: DIAGNOSIS}


def test_posting_to_a_store_nobody_serves_says_why() -> None:
    store, why = hang_exchange.announce("127.0.0.1", 1, 1, within_s=0)
    assert store is None
    assert why is not None and why.startswith("could not post to the rendezvous store 127.0.0.1:1")


def test_a_node_keeps_its_ranks_until_node_0_has_gathered(store_port: int) -> None:
    # Node 1 posts, then waits: ending its ranks at once would end node 0's torchrun and the store with it.
    node1 = hang_exchange.announce("127.0.0.1", store_port, 1)[0]
    assert hang_exchange.post(node1, "127.0.0.1", store_port, 1, DIAGNOSIS) is None
    assert not hang_exchange.await_gathered(node1, within_s=0.5)  # node 0 has not gathered yet
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(hang_exchange.await_gathered(node1, within_s=3600.0)))
    waiter.start()
    node0 = hang_exchange.connect("127.0.0.1", store_port)
    assert hang_exchange.gather(node0, 2, wait_s=0.3, seen_wait_s=60.0) == {1: DIAGNOSIS}
    waiter.join(timeout=120)
    assert waited == [True]


def test_a_node_waiting_on_a_store_that_went_away_stops_waiting() -> None:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    node1 = hang_exchange.announce("127.0.0.1", server.port, 1)[0]
    del server  # node 0's torchrun ended: the store is gone
    assert hang_exchange.await_gathered(node1, within_s=3600.0) is False
