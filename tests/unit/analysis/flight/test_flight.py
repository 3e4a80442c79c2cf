"""Flight Recorder dumps: real ones from torchrun/gloo runs that diverge on purpose, and hand-built NCCL ones."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

from ncclcheck.analysis.flight.match import analyse
from ncclcheck.analysis.logs.diagnose import analyse as analyse_logs
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.verdict import with_flight
from ncclcheck.collectors.flight import load, sniff
from ncclcheck.model.flight import FrDump


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


# what each GPU did with the collective every rank entered (start events: TORCH_NCCL_ENABLE_TIMING=1)


def progress(tmp_path: Path, rank: int, top: str, started: int) -> FrDump:
    """Ranks 0-1 after #1-#3: #4 in state ``top``; the group's last started collective ``started`` (-1: no start
    events, as torch writes it then)."""
    dump = write(tmp_path, rank, [entry(1), entry(2), entry(3), entry(4, state=top)])
    progress = tuple(dataclasses.replace(p, started=started) for p in dump.progress)
    return dataclasses.replace(dump, progress=progress)


def test_a_rank_whose_gpu_never_started_the_collective_is_named(tmp_path: Path) -> None:
    """Seen on an H100 (tests/fixtures/gpu_check/timing/sleep): rank 1 queued a long kernel before its all_reduce;
    rank 0's GPU started #4, rank 1's only has it queued."""
    rep = analyse([progress(tmp_path, 0, "started", 4), progress(tmp_path, 1, "scheduled", 3)])
    (f,) = rep.findings
    assert (f.id, f.severity, f.culprits) == ("fr-not-started", "error", (1,)), f
    assert "rank 0's GPU started it" in f.message and "never started it" in f.message
    assert "network" not in f.fix and "transport" not in f.fix


def test_must_not_every_gpu_started_is_the_transport_and_no_start_events_tell_nothing(tmp_path: Path) -> None:
    both = analyse([progress(tmp_path, r, "started", 4) for r in range(2)]).findings
    assert [(f.id, f.culprits) for f in both] == [("fr-stalled", ())] and "transport" in both[0].fix
    blind = analyse([progress(tmp_path, r, "scheduled", -1) for r in range(2)]).findings
    assert [(f.id, f.culprits) for f in blind] == [("fr-stalled", ())]
    assert "look the same here" in blind[0].message and "TORCH_NCCL_ENABLE_TIMING=1" in blind[0].fix
    assert "the transport does not" not in blind[0].fix
    queued = analyse([progress(tmp_path, r, "scheduled", 3) for r in range(2)]).findings
    assert [(f.id, f.culprits) for f in queued] == [("fr-stalled", ())] and "no rank's GPU started" in queued[0].message


def recv(peer: str, retired: bool, seq: int = 1) -> dict[str, Any]:
    return entry(
        10 + seq, "recv", "completed", is_p2p=True, p2p_seq_id=seq, profiling_name=f"nccl:recv {peer}", retired=retired
    )


def test_a_send_recv_cycle_whose_ops_were_never_launched_is_one_deadlock(tmp_path: Path) -> None:
    """Seen on an H100 (tests/fixtures/gpu_check/p2p): each rank's recv from the other read "completed", never
    retired (its CUDA events were never recorded), and logs said "no problem found" over the dumps."""
    dumps = [write(tmp_path, 0, [entry(1), recv("0<-1", False)]), write(tmp_path, 1, [entry(1), recv("1<-0", False)])]
    (f,) = analyse(dumps).findings
    assert (f.id, f.culprits) == ("fr-p2p-unmatched", (0, 1)), f
    assert "cycle (0 → 1 → 0)" in f.message and "never retired" in f.evidence[0].text


def test_must_not_retired_recvs_or_a_chain_without_a_cycle_are_one_deadlock(tmp_path: Path) -> None:
    done = [write(tmp_path, 0, [entry(1), recv("0<-1", True)]), write(tmp_path, 1, [entry(1), recv("1<-0", True)])]
    assert analyse(done).findings == ()  # finished (the dumps lost the sends' window): nothing to say
    chain = [  # rank 0 waits on 1, rank 1 on 2, rank 2 is elsewhere: two waits, no deadlock
        write(tmp_path, 0, [entry(1), recv("0<-1", False)], world=3),
        write(tmp_path, 1, [entry(1), recv("1<-2", False)], world=3),
        write(tmp_path, 2, [entry(1)], world=3),
    ]
    found = analyse(chain).findings
    assert sorted((f.id, f.culprits) for f in found) == [("fr-p2p-unmatched", (1,)), ("fr-p2p-unmatched", (2,))]
    assert not any("cycle" in f.message for f in found)
