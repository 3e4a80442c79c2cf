"""Every command's JSON: each finding's ``culprits`` agree with what its message says. A rank the message blames
("rank 1 died", "rank 1 called all_gather instead") is a culprit; a rank it says waits is not; a culprit is a rank
the message names. Walks the JSON of smoke, run, logs and watch as their pure builders and real fixtures make it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import FIXTURES
from watch_states import all_in, job, sample, stack, states

from ncclcheck.analysis.run.verdict import aborted_at_exit, early_leaver
from ncclcheck.analysis.smoke.progress import diagnose as smoke_diagnose
from ncclcheck.analysis.smoke.progress import rank_died
from ncclcheck.analysis.smoke.summary import summarise
from ncclcheck.collectors.logfiles import sources
from ncclcheck.model.findings import Finding
from ncclcheck.model.logs import ChildFailure
from ncclcheck.model.run import RankEnd
from ncclcheck.model.smoke import HangSample, Launch, RankProgress
from ncclcheck.model.stacks import Frame
from ncclcheck.sources.logs import diagnose as logs_diagnose
from ncclcheck.views.logs import to_json as logs_json
from ncclcheck.views.smoke import to_json as smoke_json
from ncclcheck.views.watch import to_json as watch_json

RANKS = r"\branks?(?:\(s\))? (\d+(?:[-,]\d+)*)\b"
BLAME = r"(?: \([^)]*\))? (?:died|called|is not in|has exited|is stopped|aborted|is the odd one out)"
BLAMES = r"^(?:hang seen live(?: on \S+)?: )?rank (\d+)" + BLAME


def expand(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def named(message: str) -> set[int]:
    return {r for m in re.finditer(RANKS, message) for r in expand(m.group(1))}


def waiting(message: str) -> set[int]:
    said = re.finditer(RANKS + r" (?:wait|waits|waiting|waited)\b", message)
    return {r for m in said for r in expand(m.group(1))}


def blamed(message: str) -> set[int]:
    return {r for m in re.finditer(RANKS + BLAME, message) for r in expand(m.group(1))}


def disagreements(finding: dict[str, Any]) -> list[str]:
    message, culprits = finding["message"], set(finding["culprits"])
    wrong = []
    if culprits - named(message):
        wrong.append(f"culprits {sorted(culprits - named(message))} are not named in the message")
    only_wait = culprits & waiting(message) - blamed(message)  # the odd rank waits too, in the other collective
    if only_wait:
        wrong.append(f"culprits {sorted(only_wait)} are said to wait")
    subject = re.match(BLAMES, message)
    if subject and int(subject.group(1)) not in culprits:
        wrong.append(f"rank {subject.group(1)} is blamed but not a culprit")
    return wrong


def smoke_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    launch = Launch(2, 1, 0, None, None, "gloo", "/logs", ())
    ranks = (
        RankProgress(0, 100, "a", "start", "all_reduce", 8, "all_reduce", 1.0, False, (), 2, 0),
        RankProgress(1, 101, "a", "start", "all_reduce", 8, "all_gather", 1.0, False, (), 2, 1),  # the drill's call
    )
    frames = {0: (Frame("all_reduce", "/t/c10d.py", 1),), 1: (Frame("all_gather", "/t/c10d.py", 1),)}
    samples = {r: HangSample(r, 100 + r, "sleeping", frames[r], None) for r in (0, 1)}
    mismatch = smoke_diagnose(ranks, samples, 2)
    yield "smoke mismatch drill", smoke_json(summarise(launch, ranks, (), mismatch, (), False))
    died = rank_died(1, ChildFailure(1, 1, "h", -9, "SIGKILL", True), ranks[1], "", None)
    yield "smoke rank died", smoke_json(summarise(launch, ranks, (), None, (died,), False))


def run_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    report = logs_diagnose(sources([str(FIXTURES / "launch" / "gloo_abort_at_exit.log")]))
    at_exit = aborted_at_exit(report, ("gloo",))
    peer = Finding("peer-closed", "error", "Connection closed by peer", ranks=(1,))
    left = early_leaver(
        (RankEnd(0, 1, 1.0, 0), RankEnd(1, 2, 1.5, 1)), {1}, report.__class__((peer,), (), (), (), peer, 1)
    )
    for name, f in (("run aborted at exit", at_exit), ("run early leaver", left)):
        assert f is not None
        yield name, {"findings": [f.to_json()]}


def logs_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    paths = (
        sorted((FIXTURES / "torchrun").glob("*.log"))
        + sorted((FIXTURES / "launch").glob("*.log"))
        + sorted((FIXTURES / "nccl_logs").glob("*.log"))
    )
    for path in paths:
        found = sources([str(path)])
        yield f"logs {path.name}", logs_json(logs_diagnose(found), [s.name for s in found])


def watch_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    mismatch = all_in(4, "all_reduce", r1=sample(1, stack("all_gather", 57)))
    outside = all_in(3, "all_reduce", r2=sample(2, stack(None, 40, "load_batch")))
    for name, rounds in (("watch mismatch", mismatch), ("watch straggler", outside)):
        yield name, watch_json(states(job(len(rounds)), *[rounds] * 4), 5.0)


def outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from smoke_outputs()
    yield from run_outputs()
    yield from logs_outputs()
    yield from watch_outputs()


CASES = list(outputs())


@pytest.mark.parametrize(("name", "data"), CASES, ids=[name for name, _ in CASES])
def test_every_finding_s_culprits_agree_with_its_message(name: str, data: dict[str, Any]) -> None:
    wrong = [
        (f.get("id", f.get("kind")), f["message"][:160], why) for f in data["findings"] for why in disagreements(f)
    ]
    assert not wrong, wrong


def test_the_checker_catches_a_disagreement() -> None:
    """The bug this test was written for: smoke's hang finding carried its culprits as ``ranks``."""
    said = "rank 1 called all_gather instead at train.py:57; rank(s) 0 wait in all_reduce"
    assert disagreements({"message": said, "culprits": []}) == ["rank 1 is blamed but not a culprit"]
    assert disagreements({"message": said, "culprits": [0, 1]}) == ["culprits [0] are said to wait"]
    assert disagreements({"message": "every rank waits", "culprits": [2]})
    assert disagreements({"message": said, "culprits": [1]}) == []


def test_smoke_s_mismatch_finding_blames_the_rank_the_hang_blames() -> None:
    _, data = CASES[0]
    assert data["hang"]["culprits"] == [1] and data["findings"][0]["culprits"] == [1]
    assert data["findings"][0]["ranks"] == [0, 1]
