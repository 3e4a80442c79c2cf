"""This process's per-socket byte counts, as watch's collector reads them."""

from __future__ import annotations

import os

from ncclcheck.collectors.sockets import socket_bytes, socket_inodes, tcp_sockets


def counts(skip: frozenset[int] = frozenset()) -> dict[int, int]:
    sockets, inodes = tcp_sockets(), socket_inodes(os.getpid())
    assert sockets is not None and inodes is not None
    return socket_bytes(sockets, inodes, skip)
