"""Launchers other than torchrun report their ranks' ends (Open MPI's mpirun, DeepSpeed's launcher), and torch's own
reports name the ranks another rank waited on (monitored_barrier, the c10d store's server). tests/fixtures/review_cases
/INDEX.md says how each input was made. Must-fire: a failed job is never a pass, the named rank is the culprit and the
rank that waited is not. Must-not: a signal that is an echo (SIGABRT after the cause, SIGTERM from outside) is not the
cause, a rank's own earlier error stays the cause, DeepSpeed's line names no rank, a successful return code is no
error."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs import events
from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASES = FIXTURES / "review_cases" / "launchers"


def read(text: str, name: str = "job.log") -> LogReport:
    return analyse(frame_all(text.splitlines(), name))


def case(name: str) -> str:
    return (CASES / name).read_text()


def test_a_rank_mpirun_saw_killed_by_sigkill_is_the_cause() -> None:
    report = read(case("09_mpirun_rank_killed_signal9.log"))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "mpi-rank-killed", report.findings
    assert cause.culprits == (3,) and "node02" in cause.message


def test_a_rank_mpirun_names_for_a_non_zero_exit_is_a_failure() -> None:
    report = read(case("09b_mpirun_nonzero_exit_block_only.log"))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "launcher-rank-ended", report.findings
    assert 2 in cause.blamed


def test_a_worker_deepspeed_saw_killed_is_a_failure_naming_no_rank() -> None:
    report = read(case("03_deepspeed_launcher_rc_minus9.log"))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "process-killed", report.findings
    assert cause.blamed == ()  # the command DeepSpeed prints is the last process's, whichever failed


def test_the_rank_monitored_barrier_names_is_the_culprit_not_the_rank_that_waited() -> None:
    report = read(case("25_monitored_barrier_names_rank3.log"))
    cause = report.root_cause
    assert cause is not None and cause.id == "monitored-barrier-failed" and cause.culprits == (3,), cause


def test_the_store_that_waited_for_its_clients_blames_nobody_in_these_logs() -> None:
    report = read(case("26_tcpstore_waiting_for_clients_7of8.log"))
    cause = report.root_cause
    assert cause is not None and cause.id == "store-clients-missing" and cause.blamed == (), cause
    assert "7 of 8" in cause.message


MPI_TAIL = "mpirun noticed that process rank 1 with PID 4242 on node node01 exited on signal {sig} ({name})."
CUDA = (
    "[1,1]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "[1,0]<stderr>:[rank0]:[E612 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective"
    " operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for"
    " 600015 milliseconds before timing out.\n"
)


@pytest.mark.parametrize(("sig", "name"), [("6", "Aborted"), ("15", "Terminated")])
def test_must_not_an_echo_signal_is_a_death_that_beats_the_cause(sig: str, name: str) -> None:
    report = read(CUDA + MPI_TAIL.format(sig=sig, name=name))
    cause = report.root_cause
    assert cause is not None and cause.id == "cuda-illegal-address", cause
    ended = [f for f in report.findings if f.id == "launcher-rank-ended"]
    assert ended and ended[0].severity == "error"  # still said: the job failed


def test_must_not_a_rank_s_own_earlier_exception_loses_to_the_launcher_s_report() -> None:
    text = "[1,2]<stderr>:ValueError: unknown backbone 'resnet5O'\n" + case("09b_mpirun_nonzero_exit_block_only.log")
    cause = read(text).root_cause
    assert cause is not None and cause.id == "python-exception" and cause.ranks == (2,), cause


@pytest.mark.parametrize(
    "line",
    [
        "[2024-03-05 10:15:22,500] [INFO] [launch.py:351:main] Process 20414 exits successfully.",
        "mpirun: process rank 3 finished",
        "Primary job terminated normally",
    ],
)
def test_must_not_a_launcher_s_healthy_end_is_an_error(line: str) -> None:
    report = read("[rank0]:Training complete\n" + line)
    assert report.status == "pass", report.findings


def test_the_shell_s_killed_after_lightning_kills_everything_is_not_the_cause() -> None:
    cause = read(case("29b_lightning_child_code1_traceback_then_killed.log")).root_cause
    assert cause is not None and cause.id == "python-exception" and cause.ranks == (1,), cause
    assert "pixel_values" in cause.message


def test_a_child_lightning_saw_killed_is_the_cause() -> None:
    report = read(case("29_lightning_child_observer_rank1_sigkill.log"))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "process-killed", cause
    assert "local rank 1" in cause.message and "code -9" in cause.message


def test_must_not_a_kill_before_lightning_s_line_is_its_doing() -> None:
    """A process killed before Lightning said it kills everything: a kill of its own (the OOM killer)."""
    text = case("29b_lightning_child_code1_traceback_then_killed.log").splitlines()
    killed = [line for line in text if line != "Killed"]
    at = next(i for i, line in enumerate(killed) if "Forcefully terminating" in line)
    cause = read("\n".join([*killed[:at], "Killed", *killed[at:]])).root_cause
    assert cause is not None and cause.id == "process-killed", cause


def test_a_virtual_nic_without_a_pci_device_is_information() -> None:
    report = read(case("17_healthy_common_harmless_warnings.log"))
    assert report.status == "pass", report.findings
    assert any(f.id == "nic-not-pci" and f.severity == "info" for f in report.findings)


def test_must_not_a_gpu_s_missing_bus_path_is_information() -> None:
    """NCCL's GPU bus path (topo.cc: /sys/class/pci_bus/...) failing fails its init: not a virtual NIC's."""
    line = "node1:42:42 [0] NCCL WARN Could not find real path of /sys/class/pci_bus/0000:07/../../0000:07:00.0"
    report = read(line)
    assert report.status != "pass" and all(f.id != "nic-not-pci" for f in report.findings), report.findings


def test_nccl_tests_wrong_values_are_a_failure() -> None:
    report = read(case("20_nccl_tests_out_of_bounds_failed.log"))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "nccl-tests-wrong", report.findings
    assert "50 wrong" in cause.message


def test_must_not_nccl_tests_with_no_wrong_value_fail() -> None:
    text = case("20_nccl_tests_out_of_bounds_failed.log").replace("50 FAILED", "0 OK")
    report = read(text)
    assert all(f.id != "nccl-tests-wrong" for f in report.findings), report.findings


@pytest.mark.parametrize(
    ("name", "cause_id", "blamed"),
    [
        ("05_mpirun_socket_message_truncated.log", "socket-message-truncated", ()),  # a mismatch: which side, unknown
        ("10_ray_train_worker_oom_killed.log", "host-oom-killed", ()),
        ("12_gloo_connectfullmesh_failed.log", "gloo-connect-failed", ()),  # the address may be a peer's
        ("13_ibv_reg_mr_failed_memlock.log", "ib-reg-mr-failed", (0,)),
        ("15_cuda_launch_timeout.log", "cuda-launch-timeout", (1,)),  # the GPU fault leads the peer's timeout
    ],
)
def test_each_cause_is_read_by_its_own_rule(name: str, cause_id: str, blamed: tuple[int, ...]) -> None:
    cause = read(case(name)).root_cause
    assert cause is not None and cause.id == cause_id and cause.blamed == blamed, cause


@pytest.mark.parametrize(
    "line",
    [
        "(raylet) [2024-05-14 08:19:44,512 I 90120 90120] (raylet) node_manager.cc:3064: 0 Workers (tasks / actors)"
        " killed due to memory pressure (OOM), 0 Workers crashed due to other reasons",
        "node02:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.12<0>",
        "Gloo connectFullMesh succeeded",
        "node02:1:1 [0] NCCL INFO Call to ibv_reg_mr_iova2 skipped: dmabuf in use",
    ],
)
def test_must_not_their_healthy_neighbours_fail(line: str) -> None:
    report = read(line)
    assert report.status == "pass", report.findings


def test_the_named_rank_s_own_error_comes_before_the_report_that_names_it() -> None:
    cause = read(case("25b_rank3_oom_then_barrier_names_rank3.log")).root_cause
    assert cause is not None and cause.id == "model-oom" and cause.ranks == (3,), cause


@pytest.mark.parametrize(
    "line",
    [
        "mpirun noticed that process rank 3 with PID 18821 on node node02 exited on signal 9 (Killed).",
        "  Process name: [[41233,1],2]",
        "[2024-03-05 10:15:22,500] [ERROR] [launch.py:322:sigkill_handler] ['python', 'train.py'] exits with return"
        " code = -9",
        "[rank: 1] Child process with PID 5512 terminated with code -9. Forcefully terminating all other processes to"
        " avoid zombies 🧟",
    ],
)
def test_events_read_a_launcher_s_report_of_a_rank_s_end_as_its_error(line: str) -> None:
    reading = events.read(line)
    assert reading.severity == events.ERROR and reading.emitter == "launcher", reading


def test_must_not_events_read_a_launcher_s_healthy_end_as_an_error() -> None:
    line = "[rank: 1] Child process with PID 5512 terminated with code 0. Forcefully terminating all other processes"
    assert events.read(line).severity != events.ERROR
