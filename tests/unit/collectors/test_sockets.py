"""The per-socket byte counters watch uses as a collective's progress, and the stacks it reuses: what needs no real
socket (real sockets and namespaces: tests/integration/watch/test_sockets_integration.py)."""

from __future__ import annotations

import os
from typing import Any

from socket_counts import counts

from ncclcheck.collectors.sockets import significant


def test_writes_to_files_and_pipes_are_not_traffic() -> None:
    before = counts()
    read, write = os.pipe()
    os.write(write, b"heartbeat\n" * 1000)
    os.close(read)
    os.close(write)
    assert significant(before, counts()) == 0


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
