"""Flight Recorder dumps: real ones from torchrun/gloo runs that diverge on purpose, and hand-built NCCL ones."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKERS

from ncclcheck.analysis.flight.match import analyse
from ncclcheck.analysis.logs.diagnose import analyse as analyse_logs
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.verdict import with_flight
from ncclcheck.cli import main
from ncclcheck.collectors.flight import load, sniff
from ncclcheck.model.flight import FrDump


@pytest.fixture(scope="module")
def real_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per-rank dumps (pickle and JSON) written by a 2-rank gloo job whose groups diverge in 4 ways."""
    out = tmp_path_factory.mktemp("fr")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(WORKERS / "fr_diverge.py"),
    ]
    run = subprocess.run(cmd, env={**os.environ, "FR_DIR": str(out)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def report(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["logs", "--json", *map(str, paths)])
    return code, json.loads(capsys.readouterr().out)


def by_group(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["desc"]: g for g in rep["flight_recorder"]["groups"]}


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
@pytest.mark.parametrize("kind", ["pickle", "json"])
def test_real_gloo_divergence_per_group(real_dumps: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    code, rep = report([real_dumps / kind], capsys)
    assert code == 1
    found = {(f["id"], tuple(f["ranks"]), tuple(f["culprits"])) for f in rep["findings"]}
    assert found == {  # two ranks that disagree are a tie: both listed, neither blamed
        ("fr-op-mismatch", (0, 1), ()),
        ("fr-size-mismatch", (0, 1), ()),
        ("fr-dtype-mismatch", (0, 1), ()),
        ("fr-not-joined", (0, 1), (1,)),  # rank 1 never issued #2: rank 0 waits on it
    }
    groups = by_group(rep)
    assert {d: g["first_divergent_seq"] for d, g in groups.items()} == {
        "healthy": None,
        "op": 2,
        "size": 1,
        "dtype": 1,
        "default_pg": 2,
    }
    assert groups["default_pg"]["pg_status"]["1"]["last_enqueued"] == 1  # rank 1 never issued #2
    assert groups["default_pg"]["pg_status"]["0"]["last_enqueued"] == 2
    assert rep["flight_recorder"]["missing_ranks"] == [] and rep["flight_recorder"]["world_size"] == 2
    # the op mismatch was issued first, so it is the root cause
    assert rep["verdict"]["root_cause"] == "fr-op-mismatch" and rep["verdict"]["ranks"] == [0, 1]
    assert rep["verdict"]["culprits"] == []
    op = next(f for f in rep["findings"] if f["id"] == "fr-op-mismatch")
    assert "all_reduce" in op["message"] and "broadcast" in op["message"]
    assert "the dumps cannot tell which side is wrong" in op["message"]
    if kind == "pickle":  # only pickles carry stacks: the user's line is named
        assert "fr_diverge.py:" in op["message"]


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
def test_human_report_shows_both_sides_of_a_tie(real_dumps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", str(real_dumps / "pickle")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("✗ root cause (rank 0-1): process group 2 (op), collective #2")
    source = (WORKERS / "fr_diverge.py").read_text().splitlines()
    for call in ('dist.all_reduce(t, group=groups["op"], async_op=True)', "dist.broadcast(t, 0, group=groups"):
        assert f"fr_diverge.py:{next(i for i, line in enumerate(source, 1) if call in line)}" in out, call
    assert "Flight Recorder: 2 dump(s), rank 0-1 of 2" in out and "first divergent collective #2" in out
    # gloo records no start of a collective: the table says so instead of an unexplained -1
    assert " -1 " not in out and "gloo records no start" in " ".join(out.split())


@pytest.mark.integration  # the dumps come from a real torchrun job (module fixture)
def test_missing_and_corrupt_dumps_analyse_the_rest(
    real_dumps: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(real_dumps / "pickle" / "rank0", tmp_path / "rank0")
    (tmp_path / "rank1").write_bytes((real_dumps / "pickle" / "rank1").read_bytes()[:100])
    code, rep = report([tmp_path], capsys)
    ids = {f["id"]: f for f in rep["findings"]}
    assert set(ids) == {"fr-dumps-missing", "fr-dump-unreadable"} and code == 0
    assert ids["fr-dumps-missing"]["ranks"] == [1]
    assert "truncated or corrupt" in ids["fr-dump-unreadable"]["message"]
    assert [d["rank"] for d in rep["flight_recorder"]["dumps"]] == [0]


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_pickle_that_names_code_is_refused_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    dump = tmp_path / "comm_lib_trace_rank_3"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Hostile(marker)]}))
    assert sniff(str(dump))
    got = load(str(dump))
    assert not isinstance(got, FrDump) and "refusing" in got.reason
    assert not marker.exists()


def entry(seq: int, op: str = "all_reduce", state: str = "completed", **kw: Any) -> dict[str, Any]:
    """One entry in the layout torch writes (FlightRecorder.hpp key names)."""
    base = {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"nccl:{op}",
        "input_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1024]],
        "output_dtypes": ["Float"],
        "state": state,
        "retired": state == "completed",
        "is_p2p": False,
        "timeout_ms": 600000,
        "frames": [
            {"name": "all_reduce", "filename": "/x/torch/distributed/distributed_c10d.py", "line": 1},
            {"name": "step", "filename": "/job/train.py", "line": 88},
        ],
    }
    return {**base, **kw}


def write(tmp_path: Path, rank: int, entries: list[dict[str, Any]], world: int = 2) -> FrDump:
    path = tmp_path / f"nccl_trace_rank_{rank}"
    last = max((e["collective_seq_id"] for e in entries if not e["is_p2p"]), default=0)
    done = max((e["collective_seq_id"] for e in entries if e["state"] == "completed" and not e["is_p2p"]), default=-1)
    path.write_bytes(
        pickle.dumps(
            {
                "version": "2.10",
                "comm_lib_version": "2.27.5",
                "nccl_comm_state": {},
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
                "pg_status": {
                    "0": {
                        "last_enqueued_collective": last,
                        "last_started_collective": last,
                        "last_completed_collective": done,
                    }
                },
                "entries": entries,
            }
        )
    )
    dump = load(str(path))
    assert isinstance(dump, FrDump)
    return dump


def test_nccl_stall_everyone_in_the_same_collective(tmp_path: Path) -> None:
    dumps = [write(tmp_path, r, [entry(1), entry(2, state="started")]) for r in range(2)]
    rep = analyse(dumps)
    assert [(f.id, f.severity) for f in rep.findings] == [("fr-stalled", "warning")]
    assert "#2" in rep.findings[0].message and "ncclcheck env" in rep.findings[0].fix


def test_ranks_dumped_at_different_times_are_not_a_divergence(tmp_path: Path) -> None:
    # rank 0 got one collective further, and every op both saw completed: a healthy job, no finding
    dumps = [write(tmp_path, 0, [entry(1), entry(2), entry(3)]), write(tmp_path, 1, [entry(1), entry(2)])]
    assert analyse(dumps).findings == ()


def test_ring_buffer_overwrite_compares_only_the_common_window(tmp_path: Path) -> None:
    # rank 0's buffer lost #1-#4; rank 1 kept them: nothing before #5 may be called missing
    dumps = [write(tmp_path, 0, [entry(s) for s in range(5, 9)]), write(tmp_path, 1, [entry(s) for s in range(1, 9)])]
    assert analyse(dumps).findings == ()
    assert analyse(dumps).groups[0].first_divergent_seq is None


def test_majority_names_the_odd_rank_out(tmp_path: Path) -> None:
    dumps = [
        write(tmp_path, r, [entry(1), entry(2, "all_gather" if r == 2 else "all_reduce", "started")], world=4)
        for r in range(4)
    ]
    rep = analyse(dumps)
    assert [(f.id, f.ranks, f.culprits) for f in rep.findings] == [("fr-op-mismatch", (0, 1, 2, 3), (2,))]
    assert "rank 0-1,3 called all_reduce at train.py:88 step" in rep.findings[0].message
    assert "rank 2 is out of step with the majority" in rep.findings[0].message


def test_two_against_two_is_a_tie_whichever_ranks_diverge(tmp_path: Path) -> None:
    for odd in ((0, 1), (2, 3), (0, 3)):
        (tmp_path / f"{odd[0]}{odd[1]}").mkdir()
        dumps = [
            write(
                tmp_path / f"{odd[0]}{odd[1]}",
                r,
                [entry(1), entry(2, "broadcast" if r in odd else "all_reduce", "started")],
                world=4,
            )
            for r in range(4)
        ]
        (finding,) = analyse(dumps).findings
        assert (finding.id, finding.ranks, finding.culprits) == ("fr-op-mismatch", (0, 1, 2, 3), ())


def test_p2p_send_nobody_receives(tmp_path: Path) -> None:
    send = entry(0, "send", "started", is_p2p=True, p2p_seq_id=1, profiling_name="nccl:send 0->1")
    recv = entry(0, "recv", "completed", is_p2p=True, p2p_seq_id=1, profiling_name="nccl:recv 1<-0")
    send2 = {**send, "p2p_seq_id": 2, "record_id": 5}
    dumps = [
        write(tmp_path, 0, [entry(1), {**send, "state": "completed"}, send2]),
        write(tmp_path, 1, [entry(1), recv]),
    ]
    rep = analyse(dumps)
    assert [(f.id, f.ranks, f.culprits) for f in rep.findings] == [("fr-p2p-unmatched", (0, 1), (1,))]
    assert "send #2 on channel 0->1" in rep.findings[0].message


def test_flight_recorder_outranks_a_timeout_but_not_a_hardware_error(tmp_path: Path) -> None:
    dumps = [write(tmp_path, 0, [entry(1), entry(2, state="started")]), write(tmp_path, 1, [entry(1)])]
    flight = analyse(dumps)
    timeout = "[rank0]:[E ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600001 milliseconds before timing out."
    logs = with_flight(analyse_logs(frame_all([timeout], "rank0.log")), flight)
    assert logs.root_cause is not None and logs.root_cause.id == "fr-not-joined" and logs.root_cause.culprits == (1,)
    ib = "node1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGidsfe80::1 hca mlx5_0"
    logs = with_flight(analyse_logs(frame_all([timeout, ib], "rank0.log")), flight)
    assert logs.root_cause is not None and logs.root_cause.id == "ib-retry-exceeded"
