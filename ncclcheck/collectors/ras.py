"""A read-only client of NCCL's RAS service (NCCL >= 2.24, on by default): the text protocol of ``src/ras/client.cc``
on ``NCCL_RAS_ADDR`` (default localhost:28028). ``CLIENT PROTOCOL 2`` → ``SERVER PROTOCOL n``; ``TIMEOUT s`` →
``OK``; ``SET FORMAT json`` → ``OK`` (NCCL >= 2.28.7, else ``ERROR: ...``: the text report is kept); ``VERBOSE
STATUS`` → the report, until the server closes the connection. It only asks; it never changes the job."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from ncclcheck.model.ras import RasStatus, status_from_json

PORT = 28028  # NCCL_RAS_CLIENT_PORT
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL
GATHER_S = 5  # what RAS may take to gather from the job (its collective leg's timeout, RAS_COLLECTIVE_LEG_TIMEOUT_SEC)
EXTRA_S = 5  # RAS_COLLECTIVE_EXTRA_TIMEOUT_SEC
MAX_REPLY = 64 << 20


@dataclass(frozen=True)
class RasReply:
    """What RAS answered: its status read from JSON, or its text report (an NCCL older than 2.28.7), or why not."""

    address: str
    status: RasStatus | None = None
    text: str | None = None
    protocol: int | None = None
    error: str | None = None  # why there is no answer, in words with what to do
    refused: bool = False  # nothing listens there


def address(env: dict[str, str] | None = None) -> tuple[str, int]:
    """NCCL_RAS_ADDR (``host:port``, ``[v6]:port``, or a host alone) or localhost:28028."""
    value = (env if env is not None else dict(os.environ)).get("NCCL_RAS_ADDR", "").strip()
    if not value:
        return "localhost", PORT
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, int(rest.lstrip(":") or PORT)
    host, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in host:
        return host or "localhost", int(port)
    return value, PORT


def query(host: str = "localhost", port: int = PORT, gather_s: int = GATHER_S) -> RasReply:
    """Ask RAS for its verbose status once."""
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=2.0) as sock:
            reader = sock.makefile("rb")
            sock.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
            hello = reader.readline().decode(errors="replace").strip()
            if not hello.upper().startswith("SERVER PROTOCOL "):
                return RasReply(where, error=f"{where} is not NCCL's RAS (it answered {hello[:60]!r})")
            protocol = int(hello.split()[-1]) if hello.split()[-1].isdigit() else None
            sock.settimeout(gather_s + EXTRA_S + 2.0)
            sock.sendall(f"TIMEOUT {gather_s}\n".encode())
            if reader.readline().strip().upper() != b"OK":
                return RasReply(where, protocol=protocol, error=f"RAS at {where} refused its timeout")
            sock.sendall(b"SET FORMAT json\n")
            as_json = reader.readline().strip().upper() == b"OK"  # else "ERROR: Unknown command": text it is
            sock.sendall(b"VERBOSE STATUS\n")
            body = reader.read(MAX_REPLY).decode(errors="replace")
    except ConnectionRefusedError:
        return RasReply(
            where,
            refused=True,
            error=f"nothing listens on {where}: no NCCL job on this node, RAS off (NCCL_RAS_ENABLE=0), an NCCL older "
            "than 2.24, or another port (the job's NCCL_RAS_ADDR)",
        )
    except (OSError, ValueError) as exc:
        return RasReply(where, error=f"RAS at {where} did not answer: {exc or type(exc).__name__}")
    now = time.monotonic()
    if as_json:
        try:
            return RasReply(where, status_from_json(body, now), protocol=protocol)
        except (ValueError, KeyError, TypeError) as exc:
            return RasReply(where, text=body, protocol=protocol, error=f"RAS's JSON could not be read: {exc}")
    return RasReply(where, text=body, protocol=protocol)
