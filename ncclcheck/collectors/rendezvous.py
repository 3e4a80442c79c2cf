"""The map of a torchrun job, read-only, from its c10d rendezvous state: every node's address, node rank and
torchrun agent heartbeat.

torchrun's c10d rendezvous keeps one key, ``torch.rendezvous.<run_id>``, on the store at ``--rdzv-endpoint``
(hosted by one node's torchrun): a base64 pickle of ``_RendezvousState``. It is read through a store client
made without a world size (no ``init/`` counter write), ``check`` before ``get`` (a ``get`` of a missing key
waits), and decoded by an unpickler that admits only the rendezvous classes and datetime: nothing from the
job's store can run code here. Nothing is ever written.

Where the endpoint is: on the launcher's own command line (``--rdzv-endpoint``/``--rdzv_endpoint``), which
each node's agent reads from /proc and reports; the run id is the ranks' TORCHELASTIC_RUN_ID.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import io
import pickle
import socket
import warnings
from datetime import timedelta
from typing import Any

from ncclcheck.model.watch import RendezvousEndpoint, RendezvousMap, RendezvousNode

KEY = "torch.rendezvous.{}"
SENTINEL = b"Y2FuaW1hZGFt"  # torch's "no state yet" value (c10d_rendezvous_backend._NULL_SENTINEL)
DEFAULT_PORT = 29400  # torchrun's when --rdzv-endpoint gives no port
RDZV_MODULE = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"


def endpoint_of(argv: list[str]) -> RendezvousEndpoint | None:
    """The c10d rendezvous endpoint a torchrun command line names; None for a static rendezvous
    (``--master-addr``: no state to read), ``--standalone`` (one node) or no torchrun at all."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--"):
            i += 1
            continue
        name, eq, value = word[2:].partition("=")
        name = name.replace("_", "-")
        if not eq and i + 1 < len(argv) and name.startswith("rdzv-"):
            value, i = argv[i + 1], i + 1
        opts.setdefault(name, value)  # the first: torchrun's own, not the training script's
        i += 1
    if "standalone" in opts or opts.get("rdzv-backend", "static") != "c10d" or not opts.get("rdzv-endpoint"):
        return None
    host, sep, port = opts["rdzv-endpoint"].rpartition(":")
    if not sep:
        host, port = opts["rdzv-endpoint"], str(DEFAULT_PORT)
    if not port.isdigit():
        return None
    return RendezvousEndpoint(host.strip("[]"), int(port), opts.get("rdzv-id") or "none")


def launcher_endpoint(pid: int | None) -> RendezvousEndpoint | None:
    """The rendezvous endpoint of the torchrun at ``pid`` (its command line), its host resolved here: a name
    only this node's /etc/hosts knows still reaches a viewer elsewhere. No connection is made."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [w.decode(errors="replace") for w in handle.read().split(b"\0") if w]
    except OSError:
        return None
    found = endpoint_of(argv)
    if found is None:
        return None
    try:
        infos = socket.getaddrinfo(found.host, found.port, type=socket.SOCK_STREAM)
    except OSError:
        return found
    address = next((str(i[4][0]) for i in infos if i[0] == socket.AF_INET), str(infos[0][4][0]) if infos else None)
    return RendezvousEndpoint(found.host, found.port, found.run_id, address)


class _NodeDesc:
    """Stands for torch's ``_NodeDesc`` (addr, pid, local_id): hashable, as it keys the state's dicts."""

    addr: str
    pid: int
    local_id: int

    def _key(self) -> tuple[Any, ...]:
        return tuple(sorted(self.__dict__.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NodeDesc) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class _State:
    """Stands for torch's ``_RendezvousState``: only its attributes are read."""


ALLOWED: dict[tuple[str, str], Any] = {
    (RDZV_MODULE, "_RendezvousState"): _State,
    (RDZV_MODULE, "_NodeDesc"): _NodeDesc,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "timezone"): datetime.timezone,
    ("datetime", "timedelta"): datetime.timedelta,
    ("builtins", "set"): set,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        return found


def decode(raw: bytes, now: datetime.datetime) -> tuple[int, tuple[RendezvousNode, ...]] | str:
    """The state's round and nodes (by node rank), or why it cannot be read."""
    if raw == SENTINEL:
        return "the rendezvous has no state yet (no node has joined)"
    try:
        state = _Unpickler(io.BytesIO(base64.b64decode(raw, validate=True))).load()
    except (binascii.Error, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        return f"the rendezvous state could not be decoded ({exc})"
    participants = getattr(state, "participants", None)
    beats = getattr(state, "last_heartbeats", None) or {}
    if not isinstance(participants, dict):
        return "the rendezvous state holds no participants"
    nodes = []
    for desc, node_rank in participants.items():
        beat = beats.get(desc)
        age = (now - beat).total_seconds() if isinstance(beat, datetime.datetime) and beat.tzinfo else None
        nodes.append(RendezvousNode(str(getattr(desc, "addr", "?")), int(node_rank), getattr(desc, "pid", None), age))
    return int(getattr(state, "round", 0)), tuple(sorted(nodes, key=lambda n: n.node_rank))


def read(endpoint: RendezvousEndpoint, timeout_s: float = 3.0) -> RendezvousMap:
    """One read of the state at ``endpoint`` (its address when known, else its host name); the map, or the
    reason it could not be read in its ``error``."""
    where, run_id = endpoint.text(), endpoint.run_id
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        with warnings.catch_warnings():  # a torch without numpy warns on import; not this tool's business
            warnings.simplefilter("ignore")
            from torch.distributed import TCPStore  # type: ignore[attr-defined]

        store = TCPStore(
            endpoint.address or endpoint.host,
            endpoint.port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )
        key = KEY.format(run_id)
        if not store.check([key]):
            return RendezvousMap(where, run_id, None, (), f"no rendezvous {run_id!r} on the store at {where}")
        raw = bytes(store.get(key))
    except ImportError:
        return RendezvousMap(where, run_id, None, (), "torch is not importable here: the rendezvous cannot be read")
    except Exception as exc:  # unreachable, refused, timed out: the map is unknown, which the view says
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return RendezvousMap(where, run_id, None, (), f"the rendezvous store at {where} could not be read: {first}")
    decoded = decode(raw, now)
    if isinstance(decoded, str):
        return RendezvousMap(where, run_id, None, (), decoded)
    return RendezvousMap(where, run_id, decoded[0], decoded[1], None)
