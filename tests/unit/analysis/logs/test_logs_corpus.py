"""``ncclcheck logs`` over the 40 real excerpts of tests/fixtures/nccl_logs_more (INDEX.md: each one's source and
what a good tool should say): no failed job reads "pass", no healthy one reads anything else. A failure in words no
rule knows is read by its emitter's own severity (glog/c10d E and F, a bare exception class ending a traceback,
SLURM's error lines, a native crash's banner, the kernel's GPU driver, NCCL's WARN behind any header) and reported
as unknown with the line quoted, never passed over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs import events
from ncclcheck.analysis.logs.diagnose import GATE, analyse
from ncclcheck.analysis.logs.frame import frame, frame_all
from ncclcheck.cli import main

MORE = FIXTURES / "nccl_logs_more"
HEALTHY = {f"M{n:02d}" for n in range(1, 12)}  # INDEX.md: "Healthy (or healthy up to the end of the excerpt)"


def excerpt(name: str) -> Path:
    (path,) = MORE.glob(f"{name}_*.log")
    return path


def report(name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["logs", "--json", str(excerpt(name))])
    return code, json.loads(capsys.readouterr().out)


def quoted(data: dict[str, Any]) -> str:
    """Every line the unrecognised-error finding quotes, one per line."""
    return "\n".join(e["text"] for f in data["findings"] if f["id"] == "unrecognised-error" for e in f["evidence"])


def test_the_corpus_is_complete() -> None:
    assert len(list(MORE.glob("M*.log"))) == 40 and (MORE / "INDEX.md").is_file()


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_healthy_excerpt_passes_with_no_error(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = report(name, capsys)
    assert code == 0 and data["verdict"]["status"] == "pass", data["findings"]
    assert not [f for f in data["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("name", sorted(f"M{n:02d}" for n in range(12, 41)))
def test_a_failed_job_never_reads_pass(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = report(name, capsys)
    assert data["verdict"]["status"] in ("fail", "unknown") and code in (1, 4), data["verdict"]


@pytest.mark.parametrize(
    ("name", "line"),
    [
        # unittest's own result line for a test that raised: an error in Python's unittest grammar, no rule for it
        ("M21", "ERROR: test_create_backend_returns_backend_if_is_host_is_false"),
    ],
)
def test_an_error_in_its_emitters_grammar_is_quoted_as_unknown(
    name: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, data = report(name, capsys)
    assert line in quoted(data), quoted(data)


@pytest.mark.parametrize(
    ("name", "cause", "said"),
    [
        ("M22", "rendezvous-closed", "the elastic rendezvous was closed"),
        ("M24", "launcher-terminated", "received signal 15 from outside"),
        ("M25", "child-no-error-file", "local rank 0 failed without an error file"),
        ("M28", "native-crash", "process 5283 on 09677202c889 crashed with a bus error (SIGBUS)"),
        ("M29", "native-crash", "process 3039 on 8d6bf97c3bf4 crashed with a bus error (SIGBUS)"),
        ("M30", "native-crash", "process 00334 on 1a62e574072d crashed with a bus error (SIGBUS)"),
        ("M31", "pcie-aer-uncorrected", "uncorrected PCIe error (Fatal) reported at 0000:00:02.0"),
        ("M32", "gpu-fallen-off-bus", "a GPU fell off the PCIe bus and does not respond (no Xid printed"),
        ("M33", "gpu-xid", "Xid 145 on GPU ...: NVLink RLW error (RLW_RXPIPE Nonfatal XC0 i0 Link 11"),
        ("M34", "gpu-ecc-error", "an uncorrectable ECC error in this GPU's memory (CUDA error 214)"),
        ("M35", "cuda-illegal-address", "CUDA error 700"),
        ("M37", "nccl-graph-file", "NCCL_GRAPH_FILE's graph uses GPU 3, which this process cannot see"),
        ("M38", "native-crash", "process 405884 on rtptest1621 received a fatal signal"),
        ("M39", "native-crash", "crashed: Fatal Python error: Segmentation fault (SIGSEGV)"),
        ("M40", "connect-failed", "poll() returned 1 with no POLLOUT event"),
    ],
)
def test_a_failure_class_is_named_with_its_specifics(
    name: str, cause: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each excerpt of a class the catalogue knows reads that class, with what its line names, never unknown."""
    code, data = report(name, capsys)
    verdict = data["verdict"]
    assert code == 1 and verdict["status"] == "fail" and verdict["root_cause"] == cause, verdict
    assert said in verdict["message"], verdict["message"]
    assert not [f for f in data["findings"] if f["id"] == "unrecognised-error"], quoted(data)


def test_a_cancelled_slurm_step_glued_to_a_progress_bar_is_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = report("M27", capsys)
    assert code == 1 and data["verdict"]["root_cause"] == "slurm-cancelled", data["verdict"]
    assert "SLURM cancelled STEP 6053.0 on DEL2212S020 at 2024-04-23T12:18:08" in data["verdict"]["message"]
    ended = next(f for f in data["findings"] if f["id"] == "slurm-task-ended")
    assert ended["message"].startswith("SLURM: task 0 on DEL2212S020: Terminated (2 lines)")
    assert ended["message"].endswith("also: SLURM: srun force-terminated StepId=6053.0")
    assert not [f for f in data["findings"] if f["id"] == "unrecognised-error"], quoted(data)


def test_the_subnet_managers_reregistration_is_benign(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = report("M10", capsys)
    assert code == 0 and [(f["id"], f["severity"]) for f in data["findings"]] == [("ib-sm-event", "info")]


@pytest.mark.parametrize(
    "line",
    [
        "E0820 14:27:21.482718 4030958 socket.cpp:752] [c10d] The server socket has failed to listen on any local",
        "[E1107 09:12:01.123456 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0 Rank 3] Process group watchdog",
        "[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 1] watchdog got stuck",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
        "srun: error: node7: task 3: Killed",
        "slurmstepd: error: *** JOB 81234 ON node7 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***",
        "Segmentation fault (core dumped)",
        "Bus error (core dumped)",
        "Fatal Python error: Segmentation fault",
        "[ 1843.3] NVRM: Xid (PCI:0000:b3:00): 79, pid=0, GPU has fallen off the bus.",
    ],
)
def test_severe_reads_the_emitters_own_marks(line: str) -> None:
    framed = frame(line, "x.log", 1)
    assert events.read(framed.text, framed.level).severity == events.ERROR
    assert GATE.hit(line)  # a chunk holding only this line is read, not only counted


@pytest.mark.parametrize(
    "line",
    [
        "W0820 14:27:21.486460 4030958 ProcessGroupNCCL.cpp:980] TORCH_NCCL_AVOID_RECORD_STREAMS is deprecated",
        "[I1107 09:12:01.123456 ProcessGroupNCCL.cpp:911] [PG ID 0 PG GUID 0 Rank 3] ProcessGroupNCCL initialized",
        "[W503 10:00:00.000000 socket.cpp:204] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
        "[Epoch 3] E1234 loss=0.12",
        "Error-free steps: 1200",
        "model.ErrorHandler registered",
        "gpu1:5021:5386 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "srun: Job step created",
    ],
)
def test_severe_does_not_read_info_warnings_or_words(line: str) -> None:
    framed = frame(line, "x.log", 1)
    assert events.read(framed.text, framed.level).severity != events.ERROR


def test_a_stuck_watchdog_ended_by_the_heartbeat_monitor_is_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    """The monitor kills the process (SIGABRT): an error, not a note, though no collective timed out here."""
    code, data = report("M17", capsys)
    assert code == 1 and data["verdict"]["root_cause"] == "watchdog-stuck", data["verdict"]
    stuck = next(f for f in data["findings"] if f["id"] == "watchdog-stuck")
    assert stuck["severity"] == "error" and stuck["ranks"] == [0, 1, 2]


def test_a_rank_its_watchdog_took_down_is_no_silent_suspect(capsys: pytest.CaptureFixture[str]) -> None:
    """M15: rank 2's BROADCAST timed out; rank 3's only line says its watchdog takes the process down (a collective
    failed there too). Rank 3 did not sit silent: it is not blamed as the rank that "did not report it"."""
    code, data = report("M15", capsys)
    verdict = data["verdict"]
    assert code == 1 and verdict["root_cause"] == "collective-timeout" and verdict["culprits"] == [], verdict
    assert "rank(s) 3 did not sit silent" in verdict["message"] and "look at them first" not in verdict["message"]
    assert "rank(s) 0-1 did not report it (no line of theirs is in these logs" in verdict["message"]


def test_a_silent_rank_is_still_the_suspect_beside_one_taken_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Must still fire: a rank whose lines are here but that neither timed out nor was taken down is the suspect."""
    taken_down, timed_out = excerpt("M15").read_text(encoding="utf-8").splitlines()[:2]
    log = tmp_path / "job.log"
    log.write_text(f"{timed_out}\n{taken_down}\n[rank1]:step 120 | loss 2.31\n", encoding="utf-8")
    main(["logs", "--json", str(log)])
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["culprits"] == [1], verdict
    assert "rank(s) 1 did not report it: look at them first" in verdict["message"]


@pytest.mark.parametrize("event", ["port error", "local catastrophic error"])
def test_an_ib_error_event_is_never_taken_for_the_benign_one(event: str) -> None:
    """Must not: NCCL's same WARN with an error event (ibv_event_type_str's words) is an IB fault, never the benign
    SM event."""
    real = "gpu1:5021:5386 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : client reregistration"
    found = analyse(frame_all([real.replace("client reregistration", event)], "x.log"))
    assert [f.id for f in found.findings] == ["ib-async-fault"] and found.status == "fail"


def test_ib_event_words_libibverbs_never_prints_stay_unexplained() -> None:
    """Must not: words that are no ibv_event_type_str name are read by no event rule: the net keeps them."""
    real = "gpu1:5021:5386 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : QP fatal error"
    found = analyse(frame_all([real], "x.log"))
    assert [f.id for f in found.findings] == ["unrecognised-error"] and found.status == "unknown"


def test_srun_out_of_memory_is_the_oom_killer_not_a_task_that_ended() -> None:
    """Must not: a task SLURM killed for host memory is host-oom-killed (the cause), not the echo slurm-task-ended."""
    found = analyse(frame_all(["srun: error: node7: task 3: Out Of Memory"], "x.log"))
    assert [f.id for f in found.findings] == ["host-oom-killed"] and found.status == "fail"


def test_a_step_that_finished_is_not_a_cancelled_one() -> None:
    """Must not: SLURM's ordinary lines around a step that ends well say nothing of a failure."""
    lines = ["srun: Job step created", "srun: debug:  task 0 done", "srun: debug:  IO thread exiting"]
    assert analyse(frame_all(lines, "x.log")).status == "pass"


@pytest.mark.parametrize("name", ["M12", "M17"])
def test_the_watchdogs_dump_signal_is_an_echo_of_its_failure(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """c10d's E lines on the watchdog's dump path ("First PG on this rank to signal dumping", "preparing to dump
    debug info") are part of the failure, not an unknown error and not its cause."""
    _, data = report(name, capsys)
    assert data["verdict"]["status"] == "fail" and data["verdict"]["root_cause"] != "fr-dump-signalled"
    assert any(f["id"] == "fr-dump-signalled" for f in data["findings"])
    assert not [f for f in data["findings"] if f["id"] == "unrecognised-error"], quoted(data)
