"""NCCL RAS: the client against a server speaking NCCL's protocol on loopback (src/ras/client.cc's side of it), the
JSON reply as src/ras/client_support.cc prints it, the text reply of an NCCL older than 2.28.7 (docs' example), and
the judgement of replies over time: who is behind by the operation counts, a frozen job, a dead process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import conftest
import pytest

from ncclcheck.analysis.ras import judge, ours
from ncclcheck.analysis.watch.flight import with_outside
from ncclcheck.collectors.ras import address, query
from ncclcheck.model.findings import Finding
from ncclcheck.model.ras import OPS, RasStatus, status_from_json
from ncclcheck.model.watch import Verdict, WatchState

FIXTURES = conftest.FIXTURES / "ras"


def nccl_json(comms: Sequence[dict[str, object]], version: str = "2.28.7", comma: bool = True) -> str:
    """A status reply in the byte layout of client_support.cc's json* functions (``comma``: False as 2.28.9 printed)."""
    out = [
        "{\n",
        f'  "nccl_version": "{version}",\n',
        '  "cuda_runtime_version": 12080,\n',
        '  "cuda_driver_version": 12080,\n',
        '  "timestamp": "2026-11-20 10:02:11",\n',
        f'  "communicators_count": {len(comms)},\n',
        '  "communicators": [\n',
    ]
    for i, comm in enumerate(comms):
        ranks: list[dict[str, object]] = comm["ranks"]  # type: ignore[assignment]
        missing: list[dict[str, object]] = comm.get("missing", [])  # type: ignore[assignment]
        if i:
            out.append(",\n")
        out += [
            "    {\n",
            f'      "hash": "{comm["hash"]}",\n',
            '      "secondary_hash": "0x1d2c:0x4e5f",\n',
            f'      "size": {len(ranks) + len(missing)},\n',
            f'      "ranks_count": {len(ranks)},\n',
            f'      "missing_ranks_count": {len(missing)},\n',
            '      "ranks": [\n',
        ]
        for j, r in enumerate(ranks):
            counts: dict[str, int] = r["counts"]  # type: ignore[assignment]
            if j:
                out.append(",\n")
            out += [
                "        {\n",
                f'          "rank": {r["rank"]},\n',
                f'          "host": "{r["host"]}",\n',
                f'          "pid": {r["pid"]},\n',
                f'          "cuda_dev": {r["rank"]},\n',
                f'          "nvml_dev": {r["rank"]},\n',
                '          "status": {\n',
                f'            "init_state": {r.get("init", 0)},\n',
                f'            "async_error": {r.get("error", 0)},\n',
                '            "finalize_called": false,\n',
                '            "destroy_flag": false,\n',
                f'            "abort_flag": {"true" if r.get("abort") else "false"}\n',
                "          },\n",
                '          "collective_counts": {\n',
            ]
            out += [
                f'            "{op}": {counts.get(op, 0)}' + ("," if k < len(OPS) - 1 else "") + "\n"
                for k, op in enumerate(OPS)
            ]
            out += ["          }\n", "        }"]
        out += ["\n", "      ]" + ("," if comma else "") + "\n", '      "missing_ranks": [\n']
        for j, m in enumerate(missing):
            if j:
                out.append(",\n")
            out += [
                "        {\n",
                f'          "rank": {m["rank"]},\n',
                f'          "host": "{m["host"]}",\n',
                f'          "pid": {m["pid"]},\n',
                '          "cuda_dev": 0,\n',
                '          "nvml_dev": 0,\n',
                '          "status": {\n',
                '            "unresponsive": true,\n',
                f'            "considered_dead": {"true" if m.get("dead") else "false"}\n',
                "          }\n",
                "        }",
            ]
        out += ["\n      ]\n", "    }"]
    out += [
        "\n  ],\n",
        '  "ras": {\n',
        '    "collection_time_sec": 0.012,\n',
        '    "timeouts_count": 0\n',
        "  }\n",
        "}\n",
    ]
    return "".join(out)


def comm(counts: Sequence[int], pid0: int = 4000, op: str = "AllReduce", **extra: object) -> dict[str, object]:
    ranks = [
        {"rank": r, "host": f"node{r // 4}", "pid": pid0 + r, "counts": {op: n, "Broadcast": 3}}
        for r, n in enumerate(counts)
    ]
    return {"hash": "0x7f3ac1d2e4b5a697", "ranks": ranks, **extra}


def replies(*counts: Sequence[int], every: float = 5.0, **extra: object) -> list[RasStatus]:
    return [status_from_json(nccl_json([comm(c, **extra)]), i * every) for i, c in enumerate(counts)]


PIDS = {4000 + r: r for r in range(8)}


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


def test_the_address_is_nccl_ras_addr_or_its_default() -> None:
    assert address({}) == ("localhost", 28028)
    assert address({"NCCL_RAS_ADDR": "10.0.0.7:29000"}) == ("10.0.0.7", 29000)
    assert address({"NCCL_RAS_ADDR": "[::1]:29001"}) == ("::1", 29001)
    assert address({"NCCL_RAS_ADDR": "node7"}) == ("node7", 28028)


def test_the_2_28_9_reply_without_its_comma_is_read() -> None:
    status = status_from_json(nccl_json([comm([1, 1], missing=[{"rank": 2, "host": "n", "pid": 9}])], comma=False), 0)
    assert len(status.comms[0].ranks) == 2 and status.comms[0].missing[0].pid == 9


def test_a_rank_behind_in_frozen_counts_is_named_by_its_global_rank() -> None:
    polls = replies([42, 42, 41, 42], [42, 42, 41, 42], [42, 42, 41, 42])
    found = judge(polls, PIDS, stall_s=10)
    assert [f.id for f in found] == ["ras-behind"] and found[0].culprits == (2,), found
    assert "rank 2 (PID 4002 on node0) launched AllReduce only up to operation 41" in found[0].message
    assert "no count moved in 3 replies over 10 s" in found[0].message


def test_must_not_counts_that_move_or_agree_or_have_not_held_past_stall_are_a_hang() -> None:
    assert judge(replies([42, 41, 42, 42], [43, 43, 42, 43], [44, 44, 44, 43]), PIDS, stall_s=5) == ()
    assert judge(replies([42] * 4, [42] * 4, [42] * 4), PIDS, stall_s=5) == ()  # idle, every rank done: no wait
    assert judge(replies([42, 41, 42, 42], [42, 41, 42, 42]), PIDS, stall_s=10) == ()  # 5 s < --stall
    assert judge(replies([42, 41, 42, 42]), PIDS, stall_s=0) == ()  # one reply: nothing held yet


def test_one_rank_ahead_or_a_tie_names_nobody() -> None:
    ahead = judge(replies([43, 42, 42, 42], [43, 42, 42, 42], [43, 42, 42, 42]), PIDS, stall_s=10)
    assert [f.id for f in ahead] == ["ras-behind"] and not ahead[0].culprits
    assert "rank 0 (PID 4000 on node0) launched AllReduce operation 43, which the other 3 have not" in ahead[0].message
    tie = judge(replies([43, 43, 42, 42], [43, 43, 42, 42], [43, 43, 42, 42]), PIDS, stall_s=10)
    assert not tie[0].culprits and "as many ranks ahead as behind" in tie[0].message


def test_a_dead_process_and_a_rank_s_async_error_are_named() -> None:
    dead = replies([42, 42, 42], missing=[{"rank": 3, "host": "node0", "pid": 4003, "dead": True}])
    found = judge(dead, PIDS, stall_s=10)
    assert [f.id for f in found] == ["ras-dead"] and found[0].culprits == (3,)
    assert "rank 3 (PID 4003 on node0) considered dead" in found[0].message
    status = status_from_json(
        nccl_json(
            [
                {
                    "hash": "0x1",
                    "ranks": [
                        {"rank": 0, "host": "a", "pid": 4000, "counts": {}},
                        {"rank": 1, "host": "a", "pid": 4001, "counts": {}, "error": 6},
                    ],
                }
            ]
        ),
        0,
    )
    assert [(f.id, f.culprits) for f in judge([status], PIDS, 10)] == [("ras-error", (1,))]


def test_a_reply_about_another_job_is_not_ours() -> None:
    status = replies([1, 1], pid0=9000)[0]
    assert not ours(status, PIDS) and ours(replies([1, 1])[0], PIDS)


def stalled_state(*findings: Finding) -> WatchState:
    from watch_states import job

    return WatchState(10.0, job(4), (), findings, Verdict("problem", "✗"))


def test_ras_goes_first_where_the_stacks_name_nobody_or_the_same_ranks_and_is_a_fact_otherwise() -> None:
    behind = judge(replies([42, 42, 41, 42], [42, 42, 41, 42], [42, 42, 41, 42]), PIDS, stall_s=10)
    nobody = Finding("stalled", "error", "rank 0-3 all wait at a CUDA synchronisation", ranks=(0, 1, 2, 3))
    first = with_outside(stalled_state(nobody), behind)
    assert first.findings[0].id == "ras-behind" and first.findings[0].culprits == (2,)
    assert first.verdict.status == "problem" and "ras-behind" in first.verdict.message
    same = Finding("straggler", "error", "rank 2 is not in any collective", ranks=(0, 1, 2, 3), culprits=(2,))
    assert with_outside(stalled_state(same), behind).findings[0].id == "ras-behind"
    other = Finding("straggler", "error", "rank 1 is not in any collective", ranks=(0, 1, 2, 3), culprits=(1,))
    added = with_outside(stalled_state(other), behind)
    assert [f.id for f in added.findings] == ["straggler", "ras-behind"] and added.findings[1].culprits == ()
    assert with_outside(stalled_state(other), ()) == stalled_state(other)


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
