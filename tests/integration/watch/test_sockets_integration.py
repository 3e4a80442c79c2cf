"""The per-socket byte counters watch uses as a collective's progress: real sockets, real namespaces."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from netns import namespaces
from socket_counts import counts

from ncclcheck.collectors.sockets import significant, socket_inodes, tcp_sockets


def pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    return server, client, accepted


def send(a: socket.socket, b: socket.socket, size: int) -> None:
    a.sendall(b"x" * size)
    got = 0
    while got < size:
        got += len(b.recv(1 << 16))


@pytest.mark.integration
def test_bytes_on_this_processes_sockets_are_counted_per_socket() -> None:
    server, client, accepted = pair()
    try:
        before = counts()
        send(client, accepted, 100_000)
        now = counts()
        # both ends are ours: 100,000 bytes acked on one end and received on the other
        assert significant(before, now) >= 200_000
        # a heartbeat's worth (an NCCL RAS keepalive, a store poll) is not a collective's
        send(client, accepted, 60)
        send(accepted, client, 60)
        assert significant(now, counts()) == 0
        # the store's port is left out, whichever end holds it
        sockets = tcp_sockets() or {}
        ends = {
            i for i, sock in sockets.items() if sock.local_port in (client.getsockname()[1], accepted.getsockname()[1])
        }
        assert ends and ends <= set(counts())
        assert not ends & set(counts(frozenset({server.getsockname()[1]})))
    finally:
        for s in (server, client, accepted):
            s.close()


@pytest.mark.integration
def test_a_process_in_another_network_namespace_is_unknown_not_silent() -> None:
    """Our socket table is not its own: counting its sockets here would read 0 and call a healthy rank quiet."""
    with namespaces(1) as (ns,):
        proc = ns.popen(["sleep", "30"])
        try:
            deadline = time.monotonic() + 10
            while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":  # `ip netns exec` has entered it
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert socket_inodes(proc.pid) is None
        finally:
            proc.kill()
            proc.wait()
    assert socket_inodes(os.getpid()) is not None


@pytest.mark.integration
def test_a_process_that_is_gone_is_unknown() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert socket_inodes(proc.pid) is None
