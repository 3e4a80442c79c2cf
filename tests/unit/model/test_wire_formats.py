"""Each wire format written and read in one home (``model/``), round-tripped over generated states: the agent line
(ncclcheck.watch-agent/3: ``model.agent_line``, a rank as a row of its numbers where its state is as last sent, its rounds
as rows of numbers and each rank's place table) and the hang record run writes (``model.run.hang_json`` /
``hang_from_json``) read back by ``logs RUN_DIR``. A field the writer carries and the reader drops, or reads back
otherwise, fails here; what the line does not carry (a rank's CPU seconds, its place) is named as such."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from watch_states import all_in, job, sample, states

from ncclcheck.model.agent_line import REPEAT, TABLE_EVERY, AgentLines, Held, agent_line
from ncclcheck.model.findings import Finding
from ncclcheck.model.run import hang_from_json, hang_json
from ncclcheck.model.shares import KINDS, Place, PlaceKey, Tally
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import Deep
from ncclcheck.model.watch import RankSample, RankView, RendezvousEndpoint, Verdict, WatchState
from ncclcheck.views.watch import to_json as watch_json

HUNDREDTHS = st.integers(0, 10**6).map(lambda n: n / 100)  # the line rounds these to 2 places
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
FRAMES = st.lists(st.builds(Frame, WORDS, WORDS, st.integers(0, 10**5), st.booleans()), max_size=4).map(tuple)
STATUS = st.sampled_from(("running", "sleeping", "disk-sleep", "stopped", "zombie", "gone", "missing"))
MAYBE_INT = st.none() | st.integers(0, 2**31)
THOUSANDTHS = st.integers(0, 10**6).map(lambda n: n / 1000)  # the line rounds times and CPU seconds to 3 places
PLACE_KEY = st.tuples(st.sampled_from(KINDS), st.sampled_from(("all_reduce", "step", "load", "ä")), st.none() | WORDS)


@st.composite
def a_round(draw: Any, start_ms: int) -> Tally:
    """A round as ``tally`` counts one: kinds present with a count, places unique, no count above its samples."""
    samples = draw(st.integers(1, 500))
    kinds = tuple((k, draw(st.integers(1, samples))) for k in KINDS if draw(st.booleans()))
    if sum(n for _, n in kinds) > samples:
        kinds = kinds[:1]
    keys = draw(st.lists(PLACE_KEY, max_size=4, unique=True))
    places = tuple(Place(*k, draw(st.integers(0, samples))) for k in keys)
    end_ms = start_ms + draw(st.integers(0, 3000))
    return Tally(
        start_ms / 1000,
        end_ms / 1000,
        samples,
        kinds,
        places,
        draw(st.none() | THOUSANDTHS),
        draw(st.none() | THOUSANDTHS),
    )


@st.composite
def rounds(draw: Any) -> tuple[Tally, ...]:
    """A rank's minute of rounds, one after the other (what the reader's window keeps as it is)."""
    out: list[Tally] = []
    at = 1_700_000_000_000
    for _ in range(draw(st.integers(0, 5))):
        out.append(draw(a_round(at)))
        at = round(out[-1].end * 1000) + draw(st.integers(1, 9000))
    return tuple(out)


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
        tallies=draw(rounds()),
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
    report = Held().read(json.loads(json.dumps(line)), 42.0)
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
    held = Held()
    first = agent_line(state, "node0", sent, 1.0, 0)
    second = agent_line(state, "node0", sent, 2.0, 1)
    assert all("stack" not in r for r in second["ranks"])  # must not: an unchanged stack is not sent again
    held.read(json.loads(json.dumps(first)), 1.0)
    report = held.read(json.loads(json.dumps(second)), 2.0)
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


@settings(max_examples=40, deadline=None)
@given(watch_state(), st.integers(1, 5))
def test_an_agent_sends_each_round_once_and_its_place_table_only_when_it_changed(state: WatchState, cut: int) -> None:
    """The agent's lines over time: each line carries the rounds that came since the one before, and a rank's place
    table only where a round names a place the reader does not hold yet; the reader ends with every round."""
    sent: dict[int, tuple[Frame, ...]] = {}
    rounds_sent: dict[int, float] = {}
    places_sent: dict[int, tuple[tuple[PlaceKey, ...], int]] = {}
    held = Held()
    report = None
    for seq, upto in enumerate((cut, None)):
        now = dataclasses.replace(
            state, ranks=tuple(dataclasses.replace(v, tallies=v.tallies[:upto]) for v in state.ranks)
        )
        line = agent_line(now, "node0", sent, 1.0 + seq, seq, rounds_sent=rounds_sent, places_sent=places_sent)
        for v, r in zip(now.ranks, line["ranks"]):
            before = v.tallies[:cut] if seq else ()
            new = [t for t in v.tallies if t not in before]
            assert len(r.get("counts", [])) == len(new)  # each round once
            known = {(p.kind, p.what, p.site) for t in before for p in t.places}
            unknown = any((p.kind, p.what, p.site) not in known for t in new for p in t.places)
            assert ("places" in r) == (unknown or (bool(new) and not seq))  # must-not: a table the reader holds
        report = held.read(json.loads(json.dumps(line)), 1.0 + seq)
    assert report is not None and [v.tallies for v in report.views] == [v.tallies for v in state.ranks]


NUMBERS_ONLY = st.fixed_dictionaries(
    {
        "since_s": HUNDREDTHS,
        "still_s": HUNDREDTHS,
        "quiet_s": HUNDREDTHS,
        "idle_s": HUNDREDTHS,
        "idle_samples": st.integers(0, 1000),
        "moved_samples": st.integers(0, 1000),
        "progressing": st.booleans(),
        "main_cpu_percent": st.none() | st.integers(0, 10**4).map(lambda n: n / 10),
        "held_s": HUNDREDTHS,
    }
)
SAMPLE_NUMBERS = st.fixed_dictionaries(
    {"cpu_percent": HUNDREDTHS, "rss_bytes": st.integers(0, 2**40), "threads": st.integers(0, 500)}
)


@st.composite
def next_look(draw: Any, state: WatchState) -> tuple[WatchState, tuple[bool, ...]]:
    """The next sample of the same ranks: each rank's numbers drawn anew, and some ranks' state changed too (the
    call it is in, or its status); which ranks changed state."""
    views, changed = [], []
    for v in state.ranks:
        sample = dataclasses.replace(v.sample, **draw(SAMPLE_NUMBERS), net_bytes=draw(MAYBE_INT))
        view = dataclasses.replace(v, sample=sample, **draw(NUMBERS_ONLY))
        change = draw(st.sampled_from(("none", "none", "collective", "status")))
        if change == "collective":
            view = dataclasses.replace(view, collective=f"{v.collective}-next")
        elif change == "status":
            view = dataclasses.replace(view, sample=dataclasses.replace(sample, status=f"{sample.status}-next"))
        views.append(view)
        changed.append(change != "none")
    return dataclasses.replace(state, ranks=tuple(views)), tuple(changed)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_rank_whose_state_is_as_last_sent_comes_as_a_row_and_reads_back_as_written(data: Any) -> None:
    """The agent's lines over time (``AgentLines``): a rank whose state is as last sent comes as a row of its numbers
    and reads back as the view it was written from; must-not: a rank whose call or status changed comes in full, in
    that line and the REPEAT - 1 after it."""
    state = data.draw(watch_state())
    lines, held = AgentLines("node0"), Held()
    looks = [(state, tuple(True for _ in state.ranks))]
    for _ in range(REPEAT + 3):
        looks.append(data.draw(next_look(looks[-1][0])))
    changed_at = [0] * len(state.ranks)
    for i, (look, changed) in enumerate(looks):
        changed_at = [i if c else at for c, at in zip(changed, changed_at)]
        line = json.loads(json.dumps(lines.line(look, 1.0 + i)))
        assert [isinstance(r, list) for r in line["ranks"]] == [i - at >= REPEAT for at in changed_at]
        report = held.read(line, 1.0 + i)
        assert report is not None
        assert report.views == tuple(dataclasses.replace(v, place=()) for v in look.ranks)


UNSENT = {"main_cpu_s": None}  # not on the line: the agent's own clock judges it


def as_read(state: WatchState) -> tuple[RankView, ...]:
    return tuple(dataclasses.replace(v, place=(), sample=dataclasses.replace(v.sample, **UNSENT)) for v in state.ranks)


def test_a_row_whose_full_entry_never_came_leaves_the_line_unread_until_the_agent_sends_it_again() -> None:
    """A reader that came in late (the first lines not seen): a row it cannot complete is not read as anything
    (never a rank with another's state); every TABLE_EVERY-th line carries every rank in full, stack and all."""
    state = states(job(2), *[all_in(2, "all_reduce")] * 3)
    lines = AgentLines("node0")
    written = [json.loads(json.dumps(lines.line(state, 1.0 + i))) for i in range(TABLE_EVERY + 1)]
    assert all(isinstance(r, dict) for line in written[:REPEAT] for r in line["ranks"])
    assert all(isinstance(r, list) for line in written[REPEAT:TABLE_EVERY] for r in line["ranks"])
    late = Held()
    assert [late.read(line, 1.0) for line in written[REPEAT:TABLE_EVERY]] == [None] * (TABLE_EVERY - REPEAT)
    again = late.read(written[TABLE_EVERY], 2.0)
    assert all(isinstance(r, dict) for r in written[TABLE_EVERY]["ranks"])
    assert again is not None and again.views == as_read(state)  # its stack too, sent again with the rank in full


def test_a_full_entry_beside_a_row_the_reader_cannot_complete_is_kept() -> None:
    """A late reader whose ranks' full entries come in different lines (their states changed at different samples)
    keeps each as it comes: the first line it reads whole is the first whose rows it holds, not a shared full one."""
    quiet = states(job(2), *[all_in(2, "all_reduce")] * 3)
    moved = states(job(2), *[all_in(2, "all_reduce"), all_in(2, "all_reduce", line=90)] * 2)
    lines = AgentLines("node0")
    written = [json.loads(json.dumps(lines.line(quiet, 1.0 + i))) for i in range(REPEAT + 1)]
    written += [json.loads(json.dumps(lines.line(moved if i == 0 else quiet, 10.0 + i))) for i in range(2)]
    assert [isinstance(r, list) for r in written[REPEAT + 1]["ranks"]] == [False, False]  # both moved to line 90
    late = Held()
    assert late.read(written[REPEAT], 1.0) is None
    assert late.read(written[REPEAT + 1], 2.0) is not None


def test_a_lost_line_with_a_change_of_state_leaves_the_reader_right_or_saying_it_does_not_know() -> None:
    """A line lost on its way (torn by a fan-out's interleaving): the change it carried comes again in the next
    REPEAT - 1 lines; where every one of them was lost, the rows name a version the reader does not hold, and the
    rank reads as one whose stack and call are not known (never the state gone by) until it comes in full."""
    waiting = states(job(2), *[all_in(2, "all_reduce")] * 3)
    died = states(job(2), *[all_in(2, "all_reduce")] * 3, all_in(2, "all_reduce", r1=sample(1, (), status="gone")))
    lines = AgentLines("node0")
    written = [json.loads(json.dumps(lines.line(waiting, 1.0 + i))) for i in range(REPEAT + 1)]
    written += [json.loads(json.dumps(lines.line(died, 10.0 + i))) for i in range(REPEAT + 2)]
    change = REPEAT + 1
    for lost in (1, REPEAT):
        held = Held()
        for line in written[:change] + written[change + lost :]:
            report = held.read(line, 1.0)
        assert report is not None
        rank1 = report.views[1]
        if lost < REPEAT:  # must-not: one line lost, the next carried the change
            assert rank1.sample.status == "gone" and rank1.sample.stack_error is None
        else:
            assert rank1.sample.status == "sleeping" and not rank1.known and rank1.collective is None
            assert rank1.sample.stack_error is not None and "not read here" in rank1.sample.stack_error
            assert report.views[0] == as_read(died)[0]


def test_an_unchanged_rank_costs_a_row_of_numbers_not_its_state() -> None:
    state = states(job(8), *[all_in(8, "all_reduce")] * 3)
    lines = AgentLines("node0")
    sizes = [len(json.dumps(lines.line(state, 1.0 + i))) for i in range(REPEAT + 1)]
    assert sizes[REPEAT] * 3 < sizes[0]


DEEPS = [None, Deep(main_locals=(("f", 1, (("x", "1"),)),)), Deep(main_locals=(("g", 2, ()),))]
CHANGES = st.sampled_from(["none"] * 6 + ["stack", "deep", "status", "pid", "stack_error"])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_many_lines_with_every_kind_of_change_read_back_as_written(data: Any) -> None:
    """Many lines from one writer to one reader, each rank's numbers new at every line and now and then its stack,
    closer look, status, pid or stack error changed, a rank left out of a line, a line with no state: every line
    reads back as the state it was written from (found by a reviewer: a closer look gone to null in the line that
    was due in full again stayed with the reader)."""
    state = data.draw(watch_state())
    state = dataclasses.replace(state, ranks=tuple(dataclasses.replace(v, tallies=()) for v in state.ranks))
    lines, held = AgentLines("node0"), Held()
    for i in range(data.draw(st.integers(2, 2 * TABLE_EVERY + 4))):
        views = []
        for v in state.ranks:
            s = dataclasses.replace(v.sample, **data.draw(SAMPLE_NUMBERS), net_bytes=data.draw(MAYBE_INT))
            change = data.draw(CHANGES)
            if change == "stack":
                s = dataclasses.replace(s, stack=data.draw(FRAMES))
            elif change == "deep":
                s = dataclasses.replace(s, deep=data.draw(st.sampled_from(DEEPS)))
            elif change == "status":
                s = dataclasses.replace(s, status=data.draw(st.sampled_from(["running", "sleeping", "gone"])))
            elif change == "pid":
                s = dataclasses.replace(s, pid=data.draw(MAYBE_INT))
            elif change == "stack_error":
                s = dataclasses.replace(s, stack_error=data.draw(st.none() | st.just("py-spy failed")))
            views.append(dataclasses.replace(v, sample=s, **data.draw(NUMBERS_ONLY)))
        state = dataclasses.replace(state, ranks=tuple(views))
        mode = data.draw(st.sampled_from(["all"] * 6 + ["drop-one", "none"]))
        shown = dataclasses.replace(state, ranks=state.ranks[1:]) if mode == "drop-one" else state
        report = held.read(json.loads(json.dumps(lines.line(None if mode == "none" else shown, 1.0 + i))), 1.0 + i)
        assert report is not None
        assert report.views == (() if mode == "none" else as_read(shown)), i


def test_a_late_reader_has_every_rank_s_rounds_from_the_shared_full_line_on() -> None:
    """The place tables go with every TABLE_EVERY-th line too, every rank's at once: a reader that came in late reads
    the rounds of every rank from that line on, whenever each rank's table was first sent (a row naming a place of a
    table it does not hold is dropped, never misread)."""
    base = states(job(2), *[all_in(2, "all_reduce")] * 3)
    place = Place("collective", "all_reduce", "/job/train.py:88 (step)", 5)

    def at(i: int) -> WatchState:  # rank 1's rounds begin at the 6th line (py-spy could not record it before)
        rounds = tuple(Tally(100.0 + k, 101.0 + k, 10, (("collective", 5),), (place,), 0.5) for k in range(i + 1))
        kept = {0: rounds[-30:], 1: tuple(t for t in rounds[-30:] if t.start >= 105.0)}
        return dataclasses.replace(base, ranks=tuple(dataclasses.replace(v, tallies=kept[v.rank]) for v in base.ranks))

    lines = AgentLines("node0")
    written = [json.loads(json.dumps(lines.line(at(i), 100.0 + i))) for i in range(TABLE_EVERY + 3)]
    late = Held()
    for line in written[8:]:  # after both ranks' tables were first sent
        report = late.read(line, -1.0)
    assert report is not None
    for v in report.views:
        assert [t.end for t in v.tallies] == [101.0 + k for k in range(TABLE_EVERY, TABLE_EVERY + 3)]
