"""Multi-node hangs: every node posts its ranks' diagnosis to the rendezvous store; node 0 gathers them.

The store is the c10d rendezvous TCPStore that node 0's torchrun agent already serves at
``--master-addr:--master-port``: no extra port to open, and it lives exactly as long as the job.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from ncclcheck.model.smoke import Hang, RankState

KEY = "ncclcheck/hang/node{}"
CONNECT_S = 3.0


def _store(master_addr: str, port: int) -> Any:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    return TCPStore(master_addr, port, is_master=False, timeout=timedelta(seconds=CONNECT_S))


def post(master_addr: str, port: int, node_rank: int, diagnosis: dict[str, Any]) -> str | None:
    """Post this node's diagnosis; returns why it could not, or None."""
    try:
        _store(master_addr, port).set(KEY.format(node_rank), json.dumps(diagnosis))
    except Exception as exc:  # store gone (node 0 already ended) or unreachable: the local report still stands
        return f"could not post to the rendezvous store {master_addr}:{port}: {exc}"
    return None


def gather(master_addr: str, port: int, nodes: int, wait_s: float) -> dict[int, dict[str, Any]]:
    """The diagnoses other nodes posted within ``wait_s`` seconds, by node rank."""
    try:
        store = _store(master_addr, port)
    except Exception:
        return {}
    found: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + wait_s
    while len(found) < nodes - 1 and time.monotonic() < deadline:
        for node in range(1, nodes):
            key = KEY.format(node)
            if node not in found and store.check([key]):
                found[node] = json.loads(store.get(key))
        time.sleep(0.1)
    return found


def hang_from_json(data: dict[str, Any]) -> Hang | None:
    """A posted diagnosis (the smoke report's ``hang`` object) back as a Hang; None if malformed."""
    try:
        states = tuple(
            RankState(int(rank), str(s["state"]), s.get("collective"), s.get("call_site"), tuple(s.get("stack", ())))
            for rank, s in data["ranks"].items()
        )
        return Hang(str(data["op"]), int(data["bytes"]), tuple(data["culprits"]), states, str(data.get("message", "")))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
