"""``watch --agents RUN_DIR/watch-agent.jsonl`` afterwards: a finished run's history is judged, up to its teardown.

The ranks a hang's teardown ended (SIGTERM from their launcher, or ``run --on-hang exit``) are not the culprits: the
hang before it is what the file holds. A rank that ended of its own is judged as it ended."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES
from watch_states import all_in, job, sample, states

from ncclcheck.collectors.agent_streams import TEARDOWN_NOTE, Streams, replay
from ncclcheck.model.agent_line import AgentLines
from ncclcheck.model.watch import RankSample
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


def ended_lines(tmp_path: Path, first_end: int | None) -> str:
    """A file of /3 lines as an agent writes them: two ranks in all_reduce; rank 1 ended with ``first_end`` (None:
    it did not) at the 3rd line and stays so (rows from then on); both ended by SIGTERM at the 6th."""
    lines, written = AgentLines("vm"), []
    for i in range(8):
        odd: dict[str, RankSample] = {}
        if first_end is not None and i >= 2:
            odd["r1"] = sample(1, (), status="gone", exit_code=first_end)
        if i >= 5:
            odd = {"r0": sample(0, (), status="gone", exit_code=-15), **odd}
            odd.setdefault("r1", sample(1, (), status="gone", exit_code=-15))
        state = states(job(2), *[all_in(2, "all_reduce", **odd)] * 3)
        written.append(json.dumps(lines.line(state, 1_800_000_000.0 + i)))
    path = tmp_path / "watch-agent.jsonl"
    path.write_text("\n".join(written) + "\n")
    assert isinstance(json.loads(written[4])["ranks"][0], list)  # rows before the teardown
    if first_end is not None:
        assert isinstance(json.loads(written[5])["ranks"][1], list)  # rank 1's end as a row: its state as last sent
    return str(path)


def test_a_rank_that_ended_of_its_own_before_the_teardown_keeps_the_history_whole_when_its_end_comes_as_rows(
    tmp_path: Path,
) -> None:
    report = replay(ended_lines(tmp_path, 1)).reports["vm"]
    assert TEARDOWN_NOTE not in report.notes  # must-not: rank 1's own failure is no teardown from outside
    assert {v.rank: v.sample.exit_code for v in report.views} == {0: -15, 1: 1}


def test_a_teardown_after_rows_is_still_told_from_the_history(tmp_path: Path) -> None:
    report = replay(ended_lines(tmp_path, None)).reports["vm"]
    assert TEARDOWN_NOTE in report.notes and all(v.sample.status != "gone" for v in report.views)


def test_agent_lines_a_late_viewer_cannot_read_yet_are_said_once_not_kept_as_the_node_s_words() -> None:
    """A viewer that began after a rank's full entry (``tail -F`` of a file, a fan-out that reconnected): its lines
    cannot be read until every rank comes in full again; what the node said is one sentence saying so, never the
    lines' JSON; must-not: a line read adds no words."""
    state = states(job(2), *[all_in(2, "all_reduce")] * 3)
    lines = AgentLines("vm")
    written = [json.dumps(lines.line(state, 1_800_000_000.0 + i)) for i in range(8)]
    read = Streams()
    for line in written:
        read.add_line(line, 1.0)
    assert "vm" in read.reports and "vm" not in read.text
    late = Streams()
    for line in written[4:]:
        late.add_line(line, 1.0)
    assert late.reports == {} and len(late.text["vm"]) == 1
    said = late.text["vm"][0]
    assert said.startswith("its agent's lines from line 4 on could not be read") and "{" not in said
