"""Each wire format written and read in one home (``model/``), round-tripped over generated states: the agent line
(ncclcheck.watch-agent/1: ``model.agent_line``) and the hang record run writes (``model.run.hang_json`` /
``hang_from_json``) read back by ``logs RUN_DIR``. A field the writer carries and the reader drops, or reads back
otherwise, fails here; what the line does not carry (a rank's CPU seconds, its place) is named as such."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from watch_states import job

from ncclcheck.model.agent_line import agent_line, parse
from ncclcheck.model.findings import Finding
from ncclcheck.model.run import hang_from_json, hang_json
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankSample, RankView, RendezvousEndpoint, Verdict, WatchState
from ncclcheck.views.watch import to_json as watch_json

HUNDREDTHS = st.integers(0, 10**6).map(lambda n: n / 100)  # the line rounds these to 2 places
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
FRAMES = st.lists(st.builds(Frame, WORDS, WORDS, st.integers(0, 10**5), st.booleans()), max_size=4).map(tuple)
STATUS = st.sampled_from(("running", "sleeping", "disk-sleep", "stopped", "zombie", "gone", "missing"))
MAYBE_INT = st.none() | st.integers(0, 2**31)


@st.composite
def rank_view(draw: Any, rank: int) -> RankView:
    s = RankSample(
        rank=rank,
        local_rank=draw(MAYBE_INT),
        pid=draw(MAYBE_INT),
        host="node0",
        status=draw(STATUS),
        cpu_percent=draw(HUNDREDTHS),
        rss_bytes=draw(st.integers(0, 2**40)),
        threads=draw(st.integers(0, 500)),
        main_cpu_s=None,  # not on the line: the agent's own clock judges it
        net_bytes=draw(MAYBE_INT),
        stack=draw(FRAMES),
        stack_error=draw(st.none() | WORDS),
        exit_code=draw(st.none() | st.integers(-64, 255)),
        ended=draw(st.none() | st.integers(1, 2 * 10**12).map(lambda n: n / 1000)),
    )
    return RankView(
        s,
        draw(st.none() | WORDS),
        draw(st.none() | WORDS),
        draw(WORDS.filter(bool)),
        since_s=draw(HUNDREDTHS),
        still_s=draw(HUNDREDTHS),
        quiet_s=draw(HUNDREDTHS),
        idle_s=draw(HUNDREDTHS),
        idle_samples=draw(st.integers(0, 1000)),
        main_cpu_percent=draw(st.none() | st.integers(0, 10**4).map(lambda n: n / 10)),
        progressing=draw(st.booleans()),
        moved_samples=draw(st.integers(0, 1000)),
        held_s=draw(HUNDREDTHS),
    )


@st.composite
def watch_state(draw: Any) -> WatchState:
    world = draw(st.integers(1, 4))
    views = tuple(draw(rank_view(r)) for r in range(world))
    return WatchState(
        0.0,
        job(world),
        views,
        (),
        Verdict("ok", ""),
        window_s=draw(HUNDREDTHS),
        samples=draw(st.integers(1, 10**4)),
        notes=tuple(draw(st.lists(WORDS, max_size=3))),
        launcher_running=draw(st.none() | st.booleans()),
        recording=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None)
@given(watch_state(), st.none() | st.integers(1, 600).map(float), st.booleans())
def test_an_agent_line_reads_back_as_the_state_it_was_written_from(
    state: WatchState, interval_s: float | None, with_endpoint: bool
) -> None:
    endpoint = RendezvousEndpoint("node0", 29500, "job-1", "10.0.0.1") if with_endpoint else None
    line = agent_line(state, "node0", {}, 1700000000.5, 7, rendezvous=endpoint, interval_s=interval_s)
    report = parse(json.loads(json.dumps(line)), {}, 42.0)
    assert report is not None
    j = state.job
    assert (report.host, report.received, report.job_id, report.world_size, report.nodes) == (
        "node0",
        42.0,
        j.id,
        j.world_size,
        j.nodes,
    )
    assert report.node_rank == 0 and report.launcher_running == state.launcher_running
    assert (report.window_s, report.samples, report.notes, report.recording) == (
        state.window_s,
        state.samples,
        state.notes,
        state.recording,
    )
    assert report.rendezvous == endpoint and report.interval_s == interval_s
    expected = tuple(dataclasses.replace(v, place=()) for v in state.ranks)
    assert report.views == expected


@settings(max_examples=30, deadline=None)
@given(watch_state())
def test_an_agent_line_leaves_out_an_unchanged_stack_and_the_reader_keeps_the_last_one(state: WatchState) -> None:
    sent: dict[int, tuple[Frame, ...]] = {}
    held: dict[tuple[str, int], tuple[Frame, ...]] = {}
    first = agent_line(state, "node0", sent, 1.0, 0)
    second = agent_line(state, "node0", sent, 2.0, 1)
    assert all("stack" not in r for r in second["ranks"])  # must not: an unchanged stack is not sent again
    parse(json.loads(json.dumps(first)), held, 1.0)
    report = parse(json.loads(json.dumps(second)), held, 2.0)
    assert report is not None and [v.sample.stack for v in report.views] == [v.sample.stack for v in state.ranks]


FINDING = st.builds(
    Finding,
    st.sampled_from(("mismatch", "straggler", "rank-died", "slow-rank", "start-up-wait")),
    st.sampled_from(("error", "warning", "info")),
    WORDS,
    WORDS,
    st.lists(st.integers(0, 63), max_size=4).map(tuple),
    culprits=st.lists(st.integers(0, 63), max_size=2).map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(FINDING, max_size=4).map(tuple), st.booleans(), st.floats(1.0, 2e9))
def test_a_hang_record_reads_back_with_its_first_error_else_warning(
    findings: tuple[Finding, ...], ended_job: bool, written: float
) -> None:
    state = WatchState(0.0, job(2), (), findings, Verdict("error", ""))
    data = json.loads(json.dumps(hang_json(watch_json(state, 5.0), ended_job)))
    record = hang_from_json(data, "/run/hangs/hang-1.json", written)
    errors = [f for f in findings if f.severity == "error"] or [f for f in findings if f.severity == "warning"]
    if not errors:  # must not: a look with no error or warning is no hang record
        assert record is None
        return
    assert record is not None
    assert record.kinds == tuple(f.id for f in errors) and record.message == errors[0].message
    assert (record.ranks, record.culprits) == (errors[0].ranks, errors[0].culprits)
    assert record.ended_job is ended_job and record.time == written and record.path == "/run/hangs/hang-1.json"


def test_what_is_not_a_hang_record_is_none() -> None:
    assert hang_from_json({"schema": "ncclcheck.run/1", "findings": []}, "x", 1.0) is None
    assert hang_from_json([], "x", 1.0) is None
    assert hang_from_json({"schema": "ncclcheck.watch/2", "findings": [{"severity": "error"}]}, "x", 1.0) is None
