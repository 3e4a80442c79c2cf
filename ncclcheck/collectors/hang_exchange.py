"""Multi-node hangs: every node posts its ranks' diagnosis to the rendezvous store; node 0 gathers them.

The store is the c10d rendezvous TCPStore that node 0's torchrun agent already serves at
``--master-addr:--master-port``: no extra port to open, and it lives exactly as long as the job.
"""

from __future__ import annotations

import json
import time
import warnings
from datetime import timedelta
from typing import Any

from ncclcheck.model.smoke import Hang, RankState

KEY = "ncclcheck/hang/node{}"
SEEN = "ncclcheck/hang/node{}/seen"
CONNECT_S = 5.0  # one try
CONNECT_WITHIN_S = 20.0  # all tries


def _store(master_addr: str, port: int, within_s: float = CONNECT_WITHIN_S) -> Any:
    """A client of the store, trying again for ``within_s``: on a loaded node one connect can time out."""
    with warnings.catch_warnings():  # a torch without numpy warns on import; not this tool's business
        warnings.simplefilter("ignore")
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

    deadline = time.monotonic() + within_s
    while True:
        try:
            return TCPStore(master_addr, port, is_master=False, timeout=timedelta(seconds=CONNECT_S))
        except Exception:
            if time.monotonic() + 1.0 >= deadline:
                raise
            time.sleep(1.0)


def announce(
    master_addr: str, port: int, node_rank: int, within_s: float = CONNECT_WITHIN_S
) -> tuple[Any | None, str | None]:
    """Tell node 0 this node saw the hang and is taking its dumps (so node 0 waits for them).

    Returns the store connection to post the diagnosis on, or None and why it cannot be reached.
    """
    try:
        store = _store(master_addr, port, within_s)
        store.set(SEEN.format(node_rank), "1")
    except Exception as exc:  # store gone (node 0 already ended) or unreachable: the local report still stands
        return None, _cannot(master_addr, port, exc)
    return store, None


def post(store: Any, master_addr: str, port: int, node_rank: int, diagnosis: dict[str, Any]) -> str | None:
    """Post this node's diagnosis on the store ``announce`` connected to; returns why it could not, or None."""
    try:
        store.set(KEY.format(node_rank), json.dumps(diagnosis))
    except Exception as exc:
        return _cannot(master_addr, port, exc)
    return None


def _cannot(master_addr: str, port: int, exc: Exception) -> str:
    return f"could not post to the rendezvous store {master_addr}:{port}: {exc}"


def gather(master_addr: str, port: int, nodes: int, wait_s: float, seen_wait_s: float) -> dict[int, dict[str, Any]]:
    """The diagnoses other nodes posted, by node rank.

    A node is waited for ``wait_s`` seconds to see the hang too, and one that said it did
    (``announce``) up to ``seen_wait_s`` for its dumps: on a loaded node they take a while.
    """
    try:
        store = _store(master_addr, port)
    except Exception:
        return {}
    found: dict[int, dict[str, Any]] = {}
    seen: set[int] = set()
    start = time.monotonic()
    while len(found) < nodes - 1:
        for node in range(1, nodes):
            if node in found:
                continue
            if store.check([KEY.format(node)]):
                found[node] = json.loads(store.get(KEY.format(node)))
            elif node not in seen and store.check([SEEN.format(node)]):
                seen.add(node)
        waited = time.monotonic() - start
        if waited > seen_wait_s or (waited > wait_s and not seen - set(found)):
            break
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
