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
GATHERED = "ncclcheck/hang/gathered"
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


def connect(master_addr: str, port: int, within_s: float = CONNECT_WITHIN_S) -> Any | None:
    """Node 0's client of the store, made before its dumps: the connection stands while the job's ranks live."""
    try:
        return _store(master_addr, port, within_s)
    except Exception:
        return None


def await_gathered(store: Any, within_s: float) -> bool:
    """Nodes > 0, after posting: keep the ranks alive until node 0 has gathered.

    Ending them at once makes node 0's ranks fail, its torchrun exit and the store (with this node's
    diagnosis on it) go before node 0's slower dumps are done. False if node 0 never said so in
    ``within_s`` seconds or the store went away.
    """
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            if store.check([GATHERED]):
                return True
            time.sleep(0.2)
    except Exception:  # the store is gone: node 0 has ended
        return False
    return False


def gather(store: Any, nodes: int, wait_s: float, seen_wait_s: float) -> dict[int, dict[str, Any]]:
    """The diagnoses other nodes posted, by node rank; then tells them they may end their ranks.

    A node is waited for ``wait_s`` seconds to see the hang too, and one that said it did
    (``announce``) up to ``seen_wait_s`` for its dumps: on a loaded node they take a while.
    """
    found: dict[int, dict[str, Any]] = {}
    try:
        _gather(store, nodes, wait_s, seen_wait_s, found)
        store.set(GATHERED, "1")
    except Exception:  # the store went away while gathering (the job ended under us): what came stands
        pass
    return found


def _gather(store: Any, nodes: int, wait_s: float, seen_wait_s: float, found: dict[int, dict[str, Any]]) -> None:
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
