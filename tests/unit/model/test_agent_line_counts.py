"""A rank's rounds on the agent line (schema /2): rows of plain numbers read with the rank's place table, which is
sent when it changes; lines recorded with schema /1 (rounds as objects) are still read. A row the reader cannot
place is dropped, never read as another place's."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from conftest import FIXTURES
from watch_states import all_in, job, states

from ncclcheck.collectors.agent_streams import Streams, replay
from ncclcheck.model import shares
from ncclcheck.model.agent_line import PLACE_TABLE_MAX, TABLE_EVERY, agent_line
from ncclcheck.model.shares import Place, PlaceKey, Tally, tally_from_json, tally_to_json, window
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import WatchState

AGENTS = FIXTURES / "agents"  # real /1 lines: see its INDEX.md
WAIT = ("collective", "all_reduce", "/job/train.py:83 (step)")
WORK = ("other", "compute", "/job/train.py:32 (compute)")


def a_round(end: float, waited: int, where: tuple[str, str, str | None] = WAIT) -> Tally:
    return Tally(end - 2.0, end, 20, (("collective", waited), ("other", 20 - waited)), (Place(*where, waited),), 0.4)


def with_rounds(per_rank: dict[int, tuple[Tally, ...]]) -> WatchState:
    state = states(job(2), *[all_in(2, "all_reduce")] * 3)
    return dataclasses.replace(
        state, ranks=tuple(dataclasses.replace(v, tallies=per_rank[v.rank]) for v in state.ranks)
    )


def lines(steps: list[dict[int, tuple[Tally, ...]]]) -> list[dict[str, Any]]:
    """The agent's lines as it writes them, keeping what it sent before (stacks, rounds, place tables)."""
    sent: dict[int, tuple[Frame, ...]] = {}
    rounds_sent: dict[int, float] = {}
    places_sent: dict[int, tuple[tuple[PlaceKey, ...], int]] = {}
    return [
        agent_line(with_rounds(s), "node0", sent, 100.0 + i, i, rounds_sent=rounds_sent, places_sent=places_sent)
        for i, s in enumerate(steps)
    ]


def read(written: list[dict[str, Any]]) -> Streams:
    streams = Streams()
    for i, line in enumerate(written):
        streams.add_line(json.dumps(line), 100.0 + i)
    return streams


def test_rounds_come_as_numbers_and_the_table_only_when_a_new_place_appears() -> None:
    one, two, three = a_round(10.0, 6), a_round(12.0, 7), a_round(14.0, 3, WORK)
    written = lines([{0: (one,), 1: (one,)}, {0: (one, two), 1: (one, two)}, {0: (one, two, three), 1: (one, two)}])
    assert all("places" in r and r["counts"] for r in written[0]["ranks"])  # must: the first rows need the table
    assert all("places" not in r for r in written[1]["ranks"])  # must-not: the same place again
    assert written[2]["ranks"][0]["places"] == [list(WAIT), list(WORK)]  # must: a new place grows the table
    assert "places" not in written[2]["ranks"][1] and "counts" not in written[2]["ranks"][1]
    report = read(written).reports["node0"]
    assert [v.tallies for v in report.views] == [(one, two, three), (one, two)]


def test_the_table_is_sent_again_for_a_reader_that_came_in_late() -> None:
    steps = [{0: tuple(a_round(10.0 + 2 * k, 6) for k in range(i + 1)), 1: ()} for i in range(TABLE_EVERY + 1)]
    written = lines(steps)
    with_table = [i for i, line in enumerate(written) if "places" in line["ranks"][0]]
    assert with_table == [0, TABLE_EVERY]
    late = read(written[1:])  # began after the first line: rows without a table are dropped until it comes
    tallies = late.reports["node0"].views[0].tallies
    assert tallies == steps[-1][0][TABLE_EVERY:]  # the rows read once the table came, no row misread before it


def test_a_row_naming_a_place_the_table_lacks_is_dropped_not_misread() -> None:
    line = lines([{0: (a_round(10.0, 6),), 1: (a_round(10.0, 6),)}])[0]
    for index in (1, -1, True, 0.0):  # past the end; from the end; not an index at all
        bad = json.loads(json.dumps(line))
        bad["ranks"][0]["counts"][0][-2] = index
        report = read([bad]).reports["node0"]
        assert report.views[0].tallies == () and report.views[1].tallies == (a_round(10.0, 6),), index


def test_a_row_whose_numbers_cannot_be_a_round_is_dropped() -> None:
    line = lines([{0: (a_round(10.0, 6),), 1: ()}])[0]
    for field, value in ((2, -1), (3, 21), (0, 11.0), (0, "x"), (8, -0.5)):  # samples; a kind above them; end first
        bad = json.loads(json.dumps(line))
        bad["ranks"][0]["counts"][0][field] = value
        assert read([bad]).reports["node0"].views[0].tallies == (), (field, value)
    short = json.loads(json.dumps(line))
    short["ranks"][0]["counts"][0] = short["ranks"][0]["counts"][0][:5]
    assert read([short]).reports["node0"].views[0].tallies == ()


def test_a_line_of_schema_1_is_still_read_with_its_rounds() -> None:
    """Written by hand in the /1 form (``tally_to_json``: rounds as objects), as the recorded files hold it."""
    one = a_round(10.0, 6)
    line = lines([{0: (), 1: ()}])[0]
    line["schema"] = "ncclcheck.watch-agent/1"
    line["ranks"][0]["rounds"] = [tally_to_json(one)]
    assert read([line]).reports["node0"].views[0].tallies == (one,)
    line["schema"] = "ncclcheck.watch-agent/4"  # must-not: a version this reader does not know is not read as its own
    assert read([line]).reports == {}


def test_a_recorded_file_of_schema_1_keeps_its_rounds() -> None:
    """tests/fixtures/agents/on_hang_exit.jsonl (real, /1): rank 0 waited in all_reduce, rank 1 in slow_batch; the
    replay holds every round the file carries up to the teardown, as the file spells them."""
    text = (AGENTS / "on_hang_exit.jsonl").read_text().splitlines()
    assert all(json.loads(line)["schema"] == "ncclcheck.watch-agent/1" for line in text)
    written: dict[int, list[Tally]] = {0: [], 1: []}
    for line in text[:-3]:  # the last three: the teardown, which the replay leaves out
        for r in json.loads(line)["ranks"]:
            written[r["rank"]] += [t for t in map(tally_from_json, r.get("rounds", [])) if t is not None]
    views = replay(str(AGENTS / "on_hang_exit.jsonl")).reports["vm"].views
    assert [v.tallies for v in views] == [window((), written[0]), window((), written[1])]
    assert views[0].tallies[0].places[0].what == "all_reduce" and views[1].tallies[-1].places[0].what == "slow_batch"


def test_equal_places_and_counts_of_many_rounds_are_held_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A viewer of thousands of ranks holds a minute of their rounds: equal places (and counts) are one object,
    which the garbage collector does not walk once per round; a memo begun afresh reads the same values."""
    one, two = a_round(10.0, 6), a_round(12.0, 6)
    report = read(lines([{0: (one, two), 1: (one,)}])).reports["node0"]
    (a, b), (c,) = (v.tallies for v in report.views)
    assert a.places[0] is b.places[0] is c.places[0] and a.kinds is c.kinds  # must: shared
    assert (a, b, c) == (one, two, one)
    other = read(lines([{0: (a_round(10.0, 7),), 1: ()}])).reports["node0"].views[0].tallies[0]
    assert other.places[0] is not a.places[0] and other.places[0].samples == 7  # must-not: another count shared
    monkeypatch.setattr(shares, "SHARED_MAX", 1)
    again = read(lines([{0: (one, two), 1: (one,)}])).reports["node0"]
    assert [v.tallies for v in again.views] == [(one, two), (one,)]


def test_a_table_grown_past_its_bound_is_begun_afresh_and_read_right() -> None:
    """A rank whose rounds keep naming new places (a call site per step): past PLACE_TABLE_MAX places the agent
    sends a fresh table, and the reader reads the rows after it with it, not with the old one."""
    many = [a_round(10.0 + 2 * k, 6, ("other", f"step_{k}", f"/job/train.py:{k} (step_{k})")) for k in range(70)]
    steps = [{0: tuple(many[max(0, i - 29) : i + 1]), 1: ()} for i in range(70)]
    written = lines(steps)
    sizes = [len(line["ranks"][0]["places"]) for line in written if "places" in line["ranks"][0]]
    assert max(sizes) == PLACE_TABLE_MAX + 1 and sizes[-1] < PLACE_TABLE_MAX  # must: grew, then begun afresh
    assert read(written).reports["node0"].views[0].tallies == window((), many)  # the last minute of them
