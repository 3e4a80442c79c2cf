"""The per-socket byte counters watch uses as a collective's progress: real sockets, real namespaces."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from netns import namespaces

from ncclcheck.collectors.sockets import significant, socket_bytes, socket_inodes, tcp_sockets


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


def counts(skip: frozenset[int] = frozenset()) -> dict[int, int]:
    sockets, inodes = tcp_sockets(), socket_inodes(os.getpid())
    assert sockets is not None and inodes is not None
    return socket_bytes(sockets, inodes, skip)


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


def test_writes_to_files_and_pipes_are_not_traffic() -> None:
    before = counts()
    read, write = os.pipe()
    os.write(write, b"heartbeat\n" * 1000)
    os.close(read)
    os.close(write)
    assert significant(before, counts()) == 0


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


def test_a_stack_is_reused_only_while_the_main_thread_has_not_run_since_its_dump(monkeypatch: Any) -> None:
    """No CPU time and no context switch since the dump: the frames cannot have moved, no new py-spy dump. A
    stack kept because the sockets moved is as old as its dump: once the thread has run since then, dump."""
    from ncclcheck.collectors import sampler
    from ncclcheck.model.smoke import Frame
    from ncclcheck.model.watch import Job

    calls: list[list[int]] = []
    answers = iter([(Frame("init_process_group", "c10d.py", 1),), (Frame("all_reduce", "c10d.py", 2),)])

    def dump(pids: list[int], *args: Any) -> dict[int, tuple[tuple[Frame, ...], None]]:
        calls.append(list(pids))
        return {pid: (next(answers), None) for pid in pids}

    monkeypatch.setattr(sampler, "dump_all", dump)
    s = sampler.Sampler(Job("j", 1, 1, None, ()))
    look = sampler._State  # status, cpu %, rss, threads, main-thread CPU s, socket bytes, exit code, switches
    first = s._stacks([7], {7: look("running", 0, 0, 1, 1.0, 0, None, 10)})
    moved = s._stacks([7], {7: look("sleeping", 0, 0, 1, 1.2, 50_000, None, 20)})  # bytes moved: kept
    after = s._stacks([7], {7: look("sleeping", 0, 0, 1, 1.2, 50_000, None, 20)})  # ran since the dump: dump
    still = s._stacks([7], {7: look("sleeping", 0, 0, 1, 1.2, 50_000, None, 20)})  # has not run since: reuse
    assert first[7][0][0].function == "init_process_group" and moved[7] == first[7]
    assert after[7][0][0].function == "all_reduce" and still[7] == after[7]
    assert [c for c in calls if c] == [[7], [7]]
