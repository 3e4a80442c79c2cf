"""Fail-slow within process groups and along pipelines on real torchrun/gloo jobs (tests/workers/slow_job.py, four
ranks): ``watch --once`` names the slow rank of a tensor-parallel group of a tp x dp job and the slow stage of a
pipeline, and nobody in a balanced tp x dp job, a balanced pipeline, or one whose first stage loads data by design."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_watch_real import RealJob, kinds, the
from test_watch_slow_real import SCRIPT, job, watch

from ncclcheck.commands.run import control
from ncclcheck.model.run import RunDir

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


# Two tensor-parallel groups that never synchronise with each other (0+1, 2+3; slow_job.py MODE=tp): the job-wide
# comparison cannot name rank 1 (ranks 2-3 wait for nobody), only its group can; the groups come from the files the
# ranks write under `ncclcheck run`'s hook (groups-rank<N>.json in the control dir, each time a group is made).
def hooked_job(tmp: Path, *, hook: bool, slow: str, subgroups: bool = False) -> RealJob:
    env = {"SLOW_RANKS": slow, "WORK": "sleep", **({"SUBGROUPS": "1"} if subgroups else {})}
    if hook:
        run_dir = RunDir(str(tmp / "run"))
        os.makedirs(run_dir.root, exist_ok=True)
        setting, hook_dir, _ = control.prepare(run_dir, True)
        assert setting is not None and hook_dir is not None
        env = control.with_hook({**os.environ, **env, setting.names[0]: setting.value}, hook_dir)
        env = {k: v for k, v in env.items() if os.environ.get(k) != v}  # RealJob adds the rest of os.environ
    return RealJob("tp", tmp / "tp.log", nproc=4, env=env, script=SCRIPT)


@pytest.fixture
def jobs() -> Iterator[list[RealJob]]:
    started: list[RealJob] = []
    yield started
    for j in started:
        j.stop()


def test_the_slow_rank_of_a_group_that_no_other_group_waits_for_is_named_from_the_groups_its_ranks_wrote(
    tmp_path: Path, jobs: list[RealJob], capsys: pytest.CaptureFixture[str]
) -> None:
    jobs.append(hooked_job(tmp_path, hook=True, slow="1", subgroups=True))  # new_subgroups: new_group, per group
    code, report = watch(jobs[-1], capsys)
    assert code == 1 and kinds(report) == {"slow-rank": [1]}, (report["verdict"], report["findings"])
    f = the(report, "slow-rank")
    assert "rank 1 holds" in f["message"] and "rank 0 wait" in f["message"], f["message"]
    written = json.loads((tmp_path / "run" / "control" / "groups-rank1.json").read_text())
    assert sorted(g["ranks"] for g in written.values()) == [[0, 1], [0, 1, 2, 3]], written  # the world, and its tp


# Rank 1 three times slower, the groups not known (plain torchrun): nobody can be named, but the verdict never says
# all is well (pending, exit 4). The groups known and every rank alike: nobody named.
@pytest.mark.parametrize(("hook", "slow"), [(False, "1"), (True, "")], ids=["groups-not-known", "balanced-groups"])
def test_must_not_unsynchronised_groups_name_anyone_without_their_members_or_when_balanced(
    tmp_path: Path, jobs: list[RealJob], capsys: pytest.CaptureFixture[str], hook: bool, slow: str
) -> None:
    jobs.append(hooked_job(tmp_path, hook=hook, slow=slow))
    code, report = watch(jobs[-1], capsys, "--settle", "14")
    assert "slow-rank" not in kinds(report) and "slow-node" not in kinds(report), report["findings"]
    if not hook:  # rank 0 waits for rank 1, which nobody can name here: never a tick
        assert code == 4 and report["verdict"]["status"] == "pending", report["verdict"]
    else:
        assert code in (0, 4), (report["verdict"], report["findings"])  # nobody blamed: ok, or pending (not proven)
