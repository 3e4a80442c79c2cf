"""The rendezvous endpoint: does MASTER_ADDR resolve, is it this node, is the port free or reachable?

Run alone on a node: ``python3 probes/rdzv.py --master-addr HOST --master-port PORT`` prints JSON
(defaults: the MASTER_ADDR / MASTER_PORT environment variables). Stdlib only.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
from dataclasses import dataclass

try:
    from . import _sysfs
    from .net import collect as collect_net
except ImportError:  # run as a script: python3 probes/rdzv.py
    import _sysfs  # type: ignore[no-redef,import-not-found]
    from net import collect as collect_net  # type: ignore[no-redef,import-not-found]

TCP_LISTEN = "0A"
DEFAULT_PORT = 29500  # torchrun's --master-port default: tried on a remote node when no port is given


@dataclass(frozen=True)
class RdzvFacts:
    """What this node can learn about ``addr:port`` in well under a second."""

    addr: str
    port: int | None
    resolved: tuple[str, ...]
    resolve_error: str | None
    local: bool
    route_source: str | None
    listening: bool
    bind: str | None
    connect: str | None  # "ok" (something listens), "timeout", or the errno name (ECONNREFUSED, EHOSTUNREACH...)
    connect_port: int | None = None  # the port tried: MASTER_PORT, or torchrun's default when it is unset


def collect(
    addr: str, port: int | None, local_addrs: frozenset[str], timeout_s: float = 2.0, root: str = "/"
) -> RdzvFacts:
    """Resolve ``addr``; on this node try to bind ``port``, elsewhere connect to it within ``timeout_s``.

    With no port (``None``) a remote address is tried on torchrun's default port; an unusable port is not tried.
    """
    resolved, error = _resolve(addr)
    local = any(_is_local(a, local_addrs) for a in resolved)
    usable_port = port if port is not None and 0 < port < 65536 else None
    listening = usable_port is not None and usable_port in listening_ports(root)
    bind = connect = None
    tried = usable_port if usable_port is not None or port is not None else DEFAULT_PORT
    if resolved and local and usable_port is not None:
        bind = _try_bind(usable_port)
    elif resolved and not local and tried is not None:
        connect = _try_connect(resolved[0], tried, timeout_s)
    return RdzvFacts(
        addr=addr,
        port=port,
        resolved=resolved,
        resolve_error=error,
        local=local,
        route_source=_route_source(resolved[0]) if resolved else None,
        listening=listening,
        bind=bind,
        connect=connect,
        connect_port=tried if connect is not None else None,
    )


def _resolve(addr: str) -> tuple[tuple[str, ...], str | None]:
    try:
        infos = socket.getaddrinfo(addr, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return (), str(exc)
    ordered: list[str] = []
    for info in infos:
        ip = str(info[4][0])
        if ip not in ordered:
            ordered.append(ip)
    return tuple(ordered), None


def _is_local(addr: str, local_addrs: frozenset[str]) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback or addr in local_addrs
    except ValueError:
        return False


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _route_source(addr: str) -> str | None:
    """The local address the kernel would use towards ``addr`` (UDP connect sends nothing)."""
    try:
        with socket.socket(_family(addr), socket.SOCK_DGRAM) as sock:
            sock.connect((addr, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def _try_bind(port: int) -> str:
    """Bind the port on all addresses like the TCPStore server does: "ok" or the errno name."""
    for family, any_addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((any_addr, port))
            return "ok"
        except OSError as exc:
            if exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL) and family == socket.AF_INET6:
                continue
            return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ok"


def _try_connect(addr: str, port: int, timeout_s: float) -> str:
    """Connect with a short timeout: "ok", "timeout" or the errno name (e.g. ECONNREFUSED)."""
    try:
        with socket.create_connection((addr, port), timeout=timeout_s):
            return "ok"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))


def listening_ports(root: str = "/") -> frozenset[int]:
    """TCP ports in LISTEN state on this host, from /proc/net/tcp{,6} (no root needed)."""
    ports = set()
    for name in ("proc/net/tcp", "proc/net/tcp6"):
        for line in (_sysfs.read(_sysfs.path(root, name)) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == TCP_LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return frozenset(ports)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port_text = os.environ.get("MASTER_PORT", "29500")
    if "--master-addr" in args:
        addr = args[args.index("--master-addr") + 1]
    if "--master-port" in args:
        port_text = args[args.index("--master-port") + 1]
    port = int(port_text) if port_text.isdigit() else None
    local = frozenset(a.addr for a in collect_net().ifaddrs)
    return _sysfs.print_json(collect(addr, port, local))


if __name__ == "__main__":
    sys.exit(main())
