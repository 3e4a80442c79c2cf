"""``ncclcheck watch --once --json`` judging real torchrun/gloo jobs by their collectives' arguments
(tests/workers/args_job.py): each finding where it must fire, and healthy jobs where it must not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKERS
from test_watch_real import RealJob, kinds, the, watch

pytestmark = pytest.mark.integration

SCRIPT = WORKERS / "args_job.py"
SOURCE = SCRIPT.read_text().splitlines()
CODE = {"p2p-deadlock", "root-mismatch", "group-mismatch", "subgroup-wait", "uneven-inputs"}
HEALTHY = ["--stall", "2.5", "--settle", "4", "--interval", "0.3"]


def at(statement: str) -> str:
    return f"args_job.py:{next(i for i, line in enumerate(SOURCE, 1) if statement in line)}"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Any]:
    started: list[RealJob] = []

    def start(mode: str, nproc: int = 2, slow: int | None = None) -> RealJob:
        env = {"SLOW_RANK": str(slow)} if slow is not None else {}
        started.append(RealJob(mode, tmp_path / f"{mode}.log", nproc=nproc, env=env, script=SCRIPT))
        return started[-1]

    yield start
    for j in started:
        j.stop()


def test_recv_recv_is_a_p2p_deadlock(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("p2p_deadlock"), capsys)
    assert code == 1 and kinds(report) == {"p2p-deadlock": [0, 1]}, report["findings"]
    f = the(report, "p2p-deadlock")
    assert f"rank 0 waits in recv from rank 1 at {at('dist.recv(t, src=peer)')}" in f["message"]
    assert f["roles"] == {"0": "waits in recv on rank 1", "1": "waits in recv on rank 0"}
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert (
        by_rank[1]["args"]["p2p"] == [{"op": "recv", "peer": 0, "tag": 0}] and by_rank[1]["args"]["group"] == "default"
    )


def test_reduce_with_each_rank_its_own_dst_is_a_root_mismatch(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = watch(job("reduce_dst"), capsys)
    assert code == 1 and kinds(report) == {"root-mismatch": []}, report["findings"]
    f = the(report, "root-mismatch")
    assert "rank 0 with dst=0; rank 1 with dst=1" in f["message"] and "cannot tell which side" in f["message"]


def test_a_rank_waiting_on_its_pair_is_not_the_odd_one_out(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Pairs [0,1] and [2,3]; rank 3 skips its pair's all_reduce and waits in the world barrier: rank 2, alone
    in the all_reduce, is the victim."""
    code, report = watch(job("pairs", nproc=4), capsys)
    assert code == 1 and set(kinds(report)) == {"subgroup-wait"}, report["findings"]
    f = the(report, "subgroup-wait")
    assert 2 not in f["culprits"] and f["roles"]["2"] == "waiting (sub-group)"
    assert f"rank 2 waits in all_reduce on a sub-group at {at('dist.all_reduce(t, group=pair)')}" in f["message"]


def test_ddp_with_a_rank_short_of_batches_is_uneven_inputs(job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    j = job("uneven_ddp")
    j.wait_for("left the loop 1")
    code, report = watch(j, capsys, "--stall", "1.5", "--settle", "4", "--interval", "0.5")
    assert code == 1 and kinds(report) == {"uneven-inputs": []}, (report["verdict"], report["findings"])
    f = the(report, "uneven-inputs")
    assert f["roles"] == {"0": "in the training loop", "1": "left the loop"} and "drop_last=True" in f["fix"]


def test_a_recv_beside_its_isend_while_the_peer_sleeps_is_a_straggler(
    job: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0: ``send_req = dist.isend(...); dist.recv(...)`` in a function; rank 1 asleep in its own code. The
    handle rank 0's frame holds is read: an op in flight, so nothing rests on rank 0's recv alone."""
    code, report = watch(job("isend_recv"), capsys)
    assert code == 1 and kinds(report) == {"straggler": [1]}, report["findings"]
    args = {r["rank"]: r.get("args") for r in report["ranks"]}[0]
    assert args is not None and args["op"] == "recv" and args["pending"] is True, args


def test_arguments_read_at_one_call_are_not_kept_for_the_next_at_the_same_frames(
    job: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 stands in broadcast(src=0) for a while each step, then in broadcast(src=1) at the same frames: watched
    from before, its arguments are those of the call it stands in now."""
    j = job("root_then_hang", slow=1)
    j.wait_for("ready 0")
    code, report = watch(j, capsys, "--stall", "2.5", "--settle", "9", "--interval", "0.3")
    assert code == 1 and kinds(report) == {"straggler": [1]}, report["findings"]
    args = {r["rank"]: r.get("args") for r in report["ranks"]}[0]
    assert args is not None and args["op"] == "broadcast" and args["src"] == 1, args


@pytest.mark.parametrize(
    ("mode", "nproc", "slow"),
    [("pipeline", 2, 0), ("subgroups", 4, 3), ("ddp", 2, 1), ("moving_root", 2, 1)],
)
def test_healthy_jobs_whose_ranks_wait_on_a_slow_one_have_no_finding(
    job: Any, capsys: pytest.CaptureFixture[str], mode: str, nproc: int, slow: int
) -> None:
    """One rank naps 0.8 s a step, so the others stand in send/recv, a sub-group's all_reduce, DDP's backward or a
    broadcast whose root moves each step: their arguments are read, and nothing is found."""
    code, report = watch(job(mode, nproc=nproc, slow=slow), capsys, *HEALTHY)
    assert report["findings"] == [], report["findings"]
    assert report["verdict"]["status"] in ("ok", "pending")
    assert code == (4 if report["verdict"]["status"] == "pending" else 0)  # pending is no pass
