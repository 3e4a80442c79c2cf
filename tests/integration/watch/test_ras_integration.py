"""NCCL RAS on loopback: the client against a server speaking NCCL's protocol (src/ras/client.cc's side of
it), and watch's RAS polls while a job stalls."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import conftest
import pytest
from ras_replies import comm, nccl_json

from ncclcheck.collectors.ras import query

FIXTURES = conftest.FIXTURES / "ras"


@contextmanager
def fake_ras(body: str, json_ok: bool = True, hello: str = "SERVER PROTOCOL 2\n") -> Iterator[int]:
    """A server speaking RAS's client protocol once: the handshake, TIMEOUT, SET FORMAT, then the reply and EOF."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as reader:
            for line in reader:
                cmd = line.decode().strip()
                seen.append(cmd)
                if cmd.startswith("CLIENT PROTOCOL"):
                    conn.sendall(hello.encode())
                elif cmd.startswith("TIMEOUT"):
                    conn.sendall(b"OK\n")
                elif cmd.startswith("SET FORMAT"):
                    conn.sendall(b"OK\n" if json_ok else b"ERROR: Unknown command set format json\n")
                elif cmd.endswith("STATUS"):
                    conn.sendall(body.encode())
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        thread.join(5)
        server.close()
    assert seen[:1] == ["CLIENT PROTOCOL 2"] and seen[-1] == "VERBOSE STATUS"  # read-only: nothing else asked


@pytest.mark.integration
def test_the_client_speaks_nccl_s_protocol_and_reads_its_json() -> None:
    with fake_ras(nccl_json([comm([42, 42, 41, 42])])) as port:
        reply = query("127.0.0.1", port, gather_s=1)
    assert reply.error is None and reply.protocol == 2 and reply.status is not None
    ranks = reply.status.comms[0].ranks
    assert (
        [r.count("AllReduce") for r in ranks] == [42, 42, 41, 42] and ranks[2].pid == 4002 and ranks[2].host == "node0"
    )


@pytest.mark.integration
def test_an_nccl_without_json_keeps_its_text_report() -> None:
    text = (FIXTURES / "healthy_32gpu_status.txt").read_text()
    with fake_ras(text, json_ok=False) as port:
        reply = query("127.0.0.1", port, gather_s=1)
    assert reply.status is None and reply.text == text and reply.error is None


@pytest.mark.integration
def test_nothing_listening_and_not_ras_are_said_in_words() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    refused = query("127.0.0.1", port)
    assert refused.error is not None and "NCCL_RAS_ENABLE=0" in refused.error and "NCCL_RAS_ADDR" in refused.error
    server = socket.create_server(("127.0.0.1", 0))

    def http() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    threading.Thread(target=http, daemon=True).start()
    other = query("127.0.0.1", server.getsockname()[1])
    server.close()
    assert other.error is not None and "is not NCCL's RAS" in other.error


@pytest.mark.integration
def test_watch_s_ras_polls_ask_while_stalled_name_the_rank_behind_and_stop_asking_a_port_nobody_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from watch_states import job

    import ncclcheck.sources.watch as live

    monkeypatch.setattr(live, "RAS_EVERY_S", 0.0)
    polls = live.RasPolls(job(4))
    body = nccl_json([comm([42, 42, 41, 42], pid0=1000)])  # watch_states' ranks have PIDs 1000-1003
    for _ in range(2):
        with fake_ras(body) as port:
            polls.host, polls.port = "127.0.0.1", port
            found = polls.findings(stalled=True, stall_s=0.0)
    assert [(f.id, f.culprits) for f in found] == [("ras-behind", (2,))] and len(polls.polls) == 2
    assert polls.findings(stalled=False, stall_s=0.0) == () and polls.polls == []  # the stall is over
    free = socket.create_server(("127.0.0.1", 0))
    polls.port = free.getsockname()[1]
    free.close()
    assert polls.findings(stalled=True, stall_s=0.0) == () and polls.refused and polls.note is None
    asked = polls.asked
    polls.findings(stalled=True, stall_s=0.0)
    assert polls.asked == asked  # refused: not asked again each look (RAS_AGAIN_S)
