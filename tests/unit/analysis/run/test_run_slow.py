"""``run``'s slow episodes, folded look by look (opened, extended, closed after the hysteresis, a new one for new
culprits, never from a hang), the ``slow`` verdict word, and how report.json and the terminal show them."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.run.slow_episodes import CLOSE_S, after_look, ended, factor
from ncclcheck.analysis.run.verdict import verdict
from ncclcheck.analysis.watch.slow import slowness
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import HangRecord, RunDir, RunOutcome, SlowEpisode, SlowSoFar
from ncclcheck.model.shares import Place, Tally
from ncclcheck.model.watch import WatchState
from ncclcheck.views.run import render, to_json

T0 = 1_700_000_000.0


def slow(culprits: tuple[int, ...] = (2,), faster: str = "2.5", kind: str = "slow-rank") -> Finding:
    who = f"rank {culprits[0]}" if len(culprits) == 1 else f"ranks {culprits[0]}-{culprits[-1]}"
    message = (
        f"{who} holds the others back: the others wait for it in all_reduce at train.py:83 63% of the time "
        f"({who}: 2%); it spends that time in compute() at train.py:32 (busy: its main thread used 97 % CPU); "
        f"without the wait the job would run about {faster}× faster. Seen in each of 4 parts of the last 12 s"
    )
    return Finding(kind, "warning", message, f"see what {who} computes", (0, 1, 2, 3), culprits=culprits)


PACE = Finding("communication-bound", "info", "every rank waits 70%–75% of its time", "overlap it", (0, 1, 2))
HANG = Finding("straggler", "error", "rank 2 is not in all_reduce", ranks=(0, 1, 2), culprits=(2,))


def look(*findings: Finding, first_round: float | None = None) -> WatchState:
    """Four ranks in all_reduce, with the findings given; ``first_round``: each rank's rounds begin there."""
    state = states(job(4), all_in(4, "all_reduce"))
    if first_round is not None:
        rounds = (Tally(first_round, first_round + 2, 200, (("collective", 100),), ()),)
        state = dataclasses.replace(state, ranks=tuple(dataclasses.replace(v, tallies=rounds) for v in state.ranks))
    return dataclasses.replace(state, findings=findings)


def fold(*looks: tuple[float, WatchState]) -> SlowSoFar:
    seen = SlowSoFar()
    for i, (now, state) in enumerate(looks):
        seen = after_look(seen, state, now, f"/run/slow/slow-{i}.json")
    return seen


def test_a_look_that_names_a_slow_rank_opens_an_episode_from_where_its_evidence_begins() -> None:
    seen = fold((T0, look(slow(), first_round=T0 - 12)))
    e = seen.open
    assert e is not None and seen.closed == ()
    assert (e.kind, e.culprits, e.looks, e.path) == ("slow-rank", (2,), 1, "/run/slow/slow-0.json")
    assert (e.start, e.end, e.factor) == (T0 - 12, T0, 2.5)
    assert fold((T0, look(slow()))).episodes[0].start == T0  # no rounds: from the look itself


def test_the_same_culprits_extend_it_and_one_missed_look_does_not_split_it() -> None:
    seen = fold(
        (T0, look(slow())),
        (T0 + 5, look(slow(faster="2.4"))),
        (T0 + 10, look()),  # a slice with a checkpoint: the finding missed once
        (T0 + 15, look(slow(faster="2.6"))),
    )
    assert seen.closed == () and seen.open is not None
    assert (seen.open.end, seen.open.looks, seen.open.factor, seen.open.missed) == (T0 + 15, 3, 2.6, 0)
    assert seen.open.path == "/run/slow/slow-0.json" and "2.6×" in seen.open.message


def test_it_closes_after_two_looks_and_ten_seconds_without_it_at_its_last_naming_look() -> None:
    quick = fold((T0, look(slow())), (T0 + 0.3, look()), (T0 + 0.6, look()), (T0 + 0.9, look()))
    assert quick.closed == () and quick.open is not None  # quick looks: not yet CLOSE_S without it
    one = fold((T0, look(slow())), (T0 + CLOSE_S + 1, look()))
    assert one.closed == () and one.open is not None  # a long gap, but one look only
    seen = fold((T0, look(slow())), (T0 + 5, look(slow())), (T0 + 10, look()), (T0 + 15, look()))
    assert seen.open is None and len(seen.closed) == 1
    assert (seen.closed[0].end, seen.closed[0].looks, seen.closed[0].missed) == (T0 + 5, 2, 0)
    again = after_look(seen, look(slow()), T0 + 20, "/run/slow/slow-9.json")
    assert again.open is not None and again.open.path == "/run/slow/slow-9.json"  # a new episode


def test_new_culprits_close_the_episode_and_open_another_that_does_not_overlap_it() -> None:
    seen = fold((T0, look(slow((2,)))), (T0 + 5, look(slow((2,)))), (T0 + 10, look(slow((3,)), first_round=T0 - 50)))
    assert [e.culprits for e in seen.episodes] == [(2,), (3,)]
    assert seen.closed[0].end == T0 + 5 and seen.open is not None
    assert seen.open.start == T0 + 5 and seen.open.path == "/run/slow/slow-2.json"
    assert fold((T0, look(slow((2,)))), (T0 + 5, look(slow((2, 3), kind="slow-node")))).open.culprits == (2, 3)  # type: ignore[union-attr]


def test_a_hang_never_opens_an_episode_and_closes_the_open_one_at_once() -> None:
    assert fold((T0, look(HANG, slow()))).episodes == ()
    seen = fold((T0, look(slow())), (T0 + 5, look(HANG)))
    assert seen.open is None and len(seen.closed) == 1 and seen.closed[0].end == T0


def test_communication_bound_is_a_note_not_an_episode() -> None:
    seen = fold((T0, look(PACE)), (T0 + 5, look()), (T0 + 10, look(PACE)))
    assert seen.episodes == ()
    assert seen.note is not None and (seen.note.first, seen.note.last, seen.note.looks) == (T0, T0 + 10, 2)


def test_the_end_of_the_job_closes_the_open_episode() -> None:
    seen = ended(fold((T0, look(slow())), (T0 + 5, look())))
    assert seen.open is None and len(seen.closed) == 1 and seen.closed[0].missed == 0
    assert ended(SlowSoFar()) == SlowSoFar()


def test_the_factor_is_read_from_what_the_watch_analysis_really_says() -> None:
    """The words of what the wait costs belong to analysis.watch.slow: a slow rank built from rounds, judged there."""
    base = states(job(3), {r: sample(r, stack("all_reduce")) for r in range(3)})

    def rounds(waited: int) -> tuple[Tally, ...]:
        places = (Place("collective", "all_reduce", "/job/train.py:83", waited), Place("other", "compute", None, 1))
        return tuple(
            Tally(T0 + 2 * i, T0 + 2 * i + 2, 200, (("collective", waited), ("other", 200 - waited)), places, 1.9)
            for i in range(8)
        )

    views = tuple(dataclasses.replace(v, tallies=rounds(4 if v.rank == 2 else 120)) for v in base.ranks)
    found = slowness(views, hosts=False)
    assert [f.id for f in found] == ["slow-rank"] and found[0].culprits == (2,)
    assert factor(found[0].message) == pytest.approx(1 / (1 - (0.6 - 0.02)), abs=0.05)


EPISODE = SlowEpisode("/run/slow/slow-1.json", T0, T0 + 40, "slow-rank", (2,), slow().message, 8, "fix it", 2.5)
NONE = LogReport((), (), (), (), None, 10)


def test_a_job_that_exited_0_with_slow_episodes_is_slow_and_names_the_longest() -> None:
    short = dataclasses.replace(EPISODE, path="/run/slow/slow-2.json", culprits=(1,), start=T0 + 50, end=T0 + 55)
    found, extra = verdict(0, False, (), NONE, None, (EPISODE, short))
    assert (found.status, found.root_cause, found.ranks, extra) == ("slow", "slow-rank", (2,), ())
    assert found.message == (
        "rank 2 held the others back for 40 s of the run (about 2.5× slower); 2 slow episodes, 45 s in all: "
        "see /run/slow/slow-1.json"
    )


def test_a_failed_or_hung_job_keeps_its_word_and_no_episodes_leave_pass_as_it_was() -> None:
    cause = Finding("cuda-oom", "error", "CUDA out of memory", ranks=(1,))
    failed, _ = verdict(1, False, (), LogReport((cause,), (), (), (), cause, 10), None, (EPISODE,))
    assert (failed.status, failed.root_cause) == ("fail", "cuda-oom")
    hang = HangRecord("/run/hangs/h.json", T0, ("straggler",), (0, 1, 2), (2,), "rank 2 is not in all_reduce")
    assert verdict(0, False, (hang,), NONE, None, (EPISODE,))[0].status == "hang"
    assert verdict(130, True, (), NONE, None, (EPISODE,))[0].root_cause == "interrupted"
    assert verdict(0, False, (), NONE, None)[0] == verdict(0, False, (), NONE, None, ())[0]
    assert verdict(0, False, (), NONE, None)[0].status == "pass"


def report(status: str = "slow") -> dict[str, object]:
    found, _ = verdict(0 if status == "slow" else 1, False, (), NONE, None, (EPISODE,))
    seen = fold((T0, look(PACE)))
    data = to_json(
        RunOutcome(("torchrun", "x.py"), RunDir("/run"), "node0", 0, 60.0, found, NONE, slow=(EPISODE,), pace=seen.note)
    )
    return json.loads(json.dumps(data))  # type: ignore[no-any-return]


def test_report_json_lists_the_episodes_and_the_note_under_the_same_schema() -> None:
    data = report()
    assert data["schema"] == "ncclcheck.run/1" and data["verdict"]["status"] == "slow"  # type: ignore[index]
    assert data["slow"] == [
        {
            "kind": "slow-rank",
            "culprits": [2],
            "start": T0,
            "end": T0 + 40,
            "seconds": 40.0,
            "looks": 8,
            "faster_without_wait": 2.5,
            "message": EPISODE.message,
            "fix": "fix it",
            "path": "/run/slow/slow-1.json",
        }
    ]
    assert data["communication_bound"]["looks"] == 1 and data["communication_bound"]["fix"] == "overlap it"  # type: ignore[index]
    assert report("fail")["slow"] == data["slow"]  # a failed job's episodes are listed too


def test_the_terminal_shows_each_episode_then_the_slow_verdict() -> None:
    out = io.StringIO()
    found, _ = verdict(0, False, (), NONE, None, (EPISODE,))
    outcome = RunOutcome((), RunDir("/run"), "", 0, 0.0, found, NONE, slow=(EPISODE,), pace=fold((T0, look(PACE))).note)
    render(outcome, Console(file=out, width=400))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("! slow-rank (rank 2), ") and lines[0].endswith(EPISODE.message)
    assert ", 40 s: " in lines[0] and lines[1] == "  fix: fix it" and lines[2] == "  record: /run/slow/slow-1.json"
    assert lines[3] == "note communication-bound (1 look): every rank waits 70%–75% of its time"
    assert lines[-2] == (
        "! slow (rank 2): rank 2 held the others back for 40 s of the run (about 2.5× slower): "
        "see /run/slow/slow-1.json"
    )
    assert lines[-1] == "exit code 0; report: /run/report.json"
