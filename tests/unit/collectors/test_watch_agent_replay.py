"""``watch --agents RUN_DIR/watch-agent.jsonl`` afterwards: a finished run's history is judged, up to its teardown.

The ranks a hang's teardown ended (SIGTERM from their launcher, or ``run --on-hang exit``) are not the culprits: the
hang before it is what the file holds. A rank that ended of its own is judged as it ended."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.collectors.agent_streams import TEARDOWN_NOTE, replay
from ncclcheck.sources.watch_nodes import NodesSource

AGENTS = FIXTURES / "agents"  # real: see its INDEX.md


def judged(name: str, stall_s: float) -> tuple[list[tuple[str, tuple[int, ...]]], str]:
    source = NodesSource.from_file(str(AGENTS / name), stall_s, 1.0)
    try:
        state = source.poll(final=True)
    finally:
        source.close()
    return [(f.id, f.culprits) for f in state.findings if f.severity != "info"], state.verdict.status


def test_a_recorded_hang_is_judged_not_the_teardown_that_ended_it() -> None:
    findings, status = judged("on_hang_exit.jsonl", 4.0)  # the run's own --stall
    assert ("straggler", (1,)) in findings and status == "problem", findings
    assert not any(fid == "finished" for fid, _ in findings), findings


def test_a_replay_before_the_stall_passed_names_nobody() -> None:
    findings, status = judged("on_hang_exit.jsonl", 60.0)
    assert not [c for _, c in findings if c] and not any(fid == "finished" for fid, _ in findings), findings
    assert status != "ok"


def test_the_replay_says_where_it_stopped() -> None:
    report = replay(str(AGENTS / "on_hang_exit.jsonl")).reports["vm"]
    assert TEARDOWN_NOTE in report.notes
    assert all(v.sample.status not in ("gone", "zombie") for v in report.views)


def test_ranks_that_ended_of_their_own_are_judged_as_they_ended() -> None:
    report = replay(str(AGENTS / "abort_at_exit.jsonl")).reports["vm"]
    assert TEARDOWN_NOTE not in report.notes and {v.sample.status for v in report.views} == {"gone"}
    findings, _ = judged("abort_at_exit.jsonl", 4.0)
    assert [fid for fid, _ in findings] == ["finished"], findings
