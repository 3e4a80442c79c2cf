"""Fail-slow within process groups and along pipelines on real torchrun/gloo jobs (tests/workers/slow_job.py, four
ranks): ``watch --once`` names the slow rank of a tensor-parallel group of a tp x dp job and the slow stage of a
pipeline, and nobody in a balanced tp x dp job, a balanced pipeline, or one whose first stage loads data by design."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_watch_real import RealJob, kinds, the
from test_watch_slow_real import SCRIPT, job, watch

pytestmark = pytest.mark.integration
__all__ = ["job"]  # the fixture


def test_the_slow_rank_of_a_tensor_parallel_group_is_named(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 1 computes three times as long: rank 0 waits for it in the tp all_reduce, ranks 2-3 in the dp one."""
    code, report = watch(job("tpdp", nproc=4, FACTOR="3"), capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [1]}, (report["verdict"], report["findings"])
    f = the(report, "slow-rank")
    assert f["message"].startswith("rank 1 holds the others back: ranks 0,2-3 wait for it in all_reduce at ")
    assert f["roles"] == {"1": "slow", "0": "waiting", "2": "waiting", "3": "waiting"}


def test_the_slow_stage_of_a_pipeline_is_named(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Stage 2 computes three times as long: the others wait for it in recv."""
    code, report = watch(job("pipeline", nproc=4, FACTOR="3"), capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [2]}, (report["verdict"], report["findings"])
    f = the(report, "slow-rank")
    assert f["message"].startswith(
        "Along the pipeline (stages wait for each other in send/recv): rank 2 holds the others back: ranks 0-1,3 "
        "wait for it in recv at "
    ), f["message"]
    assert f["fix"].startswith("balance the stages")


@pytest.mark.parametrize(
    ("mode", "env"),
    [("tpdp", {"SLOW_RANKS": ""}), ("pipeline", {"SLOW_RANKS": ""}), ("pipeline-data", {})],
    ids=["balanced-tp-x-dp", "balanced-pipeline", "pipeline-whose-first-stage-loads-data"],
)
def test_a_balanced_job_of_groups_or_stages_names_nobody(
    job: Any, capsys: pytest.CaptureFixture[str], mode: str, env: dict[str, str]
) -> None:
    code, report = watch(job(mode, nproc=4, **env), capsys, "--settle", "14")
    assert report["findings"] == [] or kinds(report) == {"communication-bound": []}, (
        report["verdict"],
        report["findings"],
    )
    verdict = report["verdict"]
    # a stage caught standing in recv at the last look (a loaded machine) is "not judged" yet, and a rank that moved
    # only at the last sample is watched on: pending, never a finding
    said = ("none holds the others back", "too soon to tell", "not proven over the window yet", "not judged")
    said += ("every rank moved at the last sample",)
    assert verdict["status"] in ("ok", "pending") and any(s in verdict["message"] for s in said), verdict
    assert code == (4 if verdict["status"] == "pending" else 0)


# Two tensor-parallel groups that never synchronise with each other (0+1, 2+3; slow_job.py MODE=tp), rank 1 three
# times slower: the job-wide comparison cannot name rank 1 (ranks 2-3 wait for nobody), and the groups' members are
# not read from a live job, so nobody is named; but the verdict never says all is well (pending, exit 4).
@pytest.fixture
def jobs() -> Iterator[list[RealJob]]:
    started: list[RealJob] = []
    yield started
    for j in started:
        j.stop()


def test_must_not_unsynchronised_groups_name_anyone_without_their_members_nor_say_all_is_well(
    tmp_path: Path, jobs: list[RealJob], capsys: pytest.CaptureFixture[str]
) -> None:
    jobs.append(RealJob("tp", tmp_path / "tp.log", nproc=4, env={"SLOW_RANKS": "1"}, script=SCRIPT))
    code, report = watch(jobs[-1], capsys, "--settle", "14")
    assert "slow-rank" not in kinds(report) and "slow-node" not in kinds(report), report["findings"]
    assert code == 4 and report["verdict"]["status"] == "pending", report["verdict"]  # never a tick over it
