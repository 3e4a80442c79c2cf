"""Bytes moved on a process's TCP sockets, per socket, from the kernel's sock_diag (inet_diag) netlink interface.

What a collective moves over gloo (and NCCL's socket transport) crosses TCP sockets; what a logging
thread, a metrics exporter or tqdm writes goes to files, pipes and ttys, which are not counted here.
Background chatter does cross sockets (NCCL RAS keepalives every second on each peer connection, the
watchdog's store polls): only a socket that moved more than ``SMALL`` bytes per second between two samples
(and at least ``SMALL``) counts.
The kernel keeps ``tcpi_bytes_acked`` and ``tcpi_bytes_received`` for every TCP socket; one dump of
the node's sockets (one netlink request per address family) is matched to each process by the socket
inodes in ``/proc/PID/fd``. Reading them needs no privilege beyond reading the process's fd table.
Sockets are per network namespace: run the watcher in the job's namespace (a container's, a pod's).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
TCP_LISTEN, TCP_TIME_WAIT = 10, 6
# Every state but LISTEN (no data) and TIME_WAIT (no owner).
STATES = 0xFFF & ~(1 << TCP_LISTEN) & ~(1 << TCP_TIME_WAIT)
NLMSGHDR = struct.Struct("=IHHII")
REQUEST = struct.Struct("=BBBBI48s")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid
MESSAGE = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg, through idiag_inode
RTATTR = struct.Struct("=HH")
BYTES_ACKED_AT, BYTES_RECEIVED_AT = 120, 128
WELL_KNOWN = 1024
SMALL = 1024  # bytes per socket and second between two samples (1 KiB at least): keepalives and polls, not a collective


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket: its ends and the bytes it has carried, as the kernel counts them."""

    inode: int
    local_port: int
    remote_addr: str
    remote_port: int
    bytes_acked: int
    bytes_received: int


def tcp_sockets() -> dict[int, TcpSocket] | None:
    """Every TCP socket of this network namespace by inode, or None where sock_diag cannot be read."""
    found: dict[int, TcpSocket] = {}
    try:
        for family in (socket.AF_INET, socket.AF_INET6):
            for sock in _dump(family):
                found[sock.inode] = sock
    except OSError:
        return None
    return found


def socket_inodes(pid: int) -> set[int] | None:
    """The inodes of the sockets a process holds open; None when they cannot be counted from here: its fd
    table is not readable, or it lives in another network namespace (our socket table is not its own)."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"):
            return None
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def socket_bytes(sockets: dict[int, TcpSocket], inodes: Iterable[int], skip_ports: frozenset[int]) -> dict[int, int]:
    """Bytes moved so far on each of these sockets that can carry a collective: not those to or from
    ``skip_ports`` (the store, which NCCL's watchdog polls while stuck) nor well-known ports below 1024 (an
    exporter's HTTPS); gloo and NCCL connect ephemeral ports to ephemeral ports."""
    out = {}
    for inode in inodes:
        sock = sockets.get(inode)
        if sock is None or sock.local_port in skip_ports or sock.remote_port in skip_ports:
            continue
        if sock.local_port < WELL_KNOWN or sock.remote_port < WELL_KNOWN:
            continue
        out[inode] = sock.bytes_acked + sock.bytes_received
    return out


def significant(before: dict[int, int], now: dict[int, int], floor: int = SMALL) -> int:
    """Bytes moved since ``before`` on the sockets that moved more than ``floor`` each: what a collective
    moves, not a heartbeat (NCCL RAS sends a keepalive down each of its connections every second, the
    watchdog polls the store, a few dozen bytes each)."""
    total = 0
    for inode, count in now.items():
        delta = count - before.get(inode, 0)
        if delta > floor:
            total += delta
    return total


def _dump(family: int) -> Iterable[TcpSocket]:
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(2.0)
        body = REQUEST.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, STATES, b"")
        header = NLMSGHDR.pack(NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
        nl.sendall(header + body)
        while True:
            data = nl.recv(1 << 20)
            if not data:
                return
            offset = 0
            while offset + NLMSGHDR.size <= len(data):
                length, kind, _, _, _ = NLMSGHDR.unpack_from(data, offset)
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (errno,) = struct.unpack_from("=i", data, offset + NLMSGHDR.size)
                    raise OSError(-errno, os.strerror(-errno))
                if length < NLMSGHDR.size:
                    return
                parsed = _message(family, data[offset + NLMSGHDR.size : offset + length])
                if parsed is not None:
                    yield parsed
                offset += (length + 3) & ~3


def _message(family: int, payload: bytes) -> TcpSocket | None:
    if len(payload) < MESSAGE.size:
        return None
    fields = MESSAGE.unpack_from(payload)
    sport, dport, dst, inode = fields[4], fields[5], fields[7], fields[-1]
    info = _attribute(payload[MESSAGE.size :], INET_DIAG_INFO)
    if info is None or len(info) < BYTES_RECEIVED_AT + 8:
        return None
    acked, received = struct.unpack_from("=QQ", info, BYTES_ACKED_AT)
    remote = socket.inet_ntop(family, dst[:4] if family == socket.AF_INET else dst)
    return TcpSocket(inode, int.from_bytes(sport, "big"), remote, int.from_bytes(dport, "big"), acked, received)


def _attribute(attrs: bytes, wanted: int) -> bytes | None:
    offset = 0
    while offset + RTATTR.size <= len(attrs):
        length, kind = RTATTR.unpack_from(attrs, offset)
        if length < RTATTR.size:
            return None
        if kind == wanted:
            return attrs[offset + RTATTR.size : offset + length]
        offset += (length + 3) & ~3
    return None
