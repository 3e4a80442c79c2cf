"""Crashes, dead threads and fingerprint mismatches read across lines, on the output of real processes made to fail
here (tests/fixtures/real_failures/INDEX.md says how each was made); each reading has its must-not-fire twin."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport

REAL = FIXTURES / "real_failures"


def report(name: str, keep: int | None = None) -> LogReport:
    lines = (REAL / name).read_text(encoding="utf-8").splitlines()
    return analyse(frame_all(lines[:keep], name))


def finding(rep: LogReport, fid: str) -> Finding:
    found = [f for f in rep.findings if f.id == fid]
    assert len(found) == 1, [f.id for f in rep.findings]
    return found[0]


def ids(rep: LogReport) -> set[str]:
    return {f.id for f in rep.findings}


@pytest.mark.parametrize(
    ("name", "signal", "site"),
    [
        ("segv_rank1_faulthandler.log", "Segmentation fault (SIGSEGV)", "native_crash.py:17 in crash"),
        ("segv_rank1_prefixed.log", "Segmentation fault (SIGSEGV)", "native_crash.py:17 in crash"),
        ("abort_rank1_faulthandler.log", "Aborted (SIGABRT)", "native_crash.py:19 in crash"),
        ("sigbus_rank1_faulthandler.log", "Bus error (SIGBUS)", "native_crash.py:25 in crash"),
    ],
)
def test_a_faulthandler_block_names_the_rank_and_the_users_frame(name: str, signal: str, site: str) -> None:
    rep = report(name)
    crash = finding(rep, "native-crash")
    assert rep.root_cause == crash and crash.culprits == (1,) and crash.ranks == (1,)
    assert crash.message.startswith("rank 1 (local rank 1 on localhost, pid ")
    assert f"crashed: Fatal Python error: {signal} at {site} (called from native_crash.py:33 in step" in crash.message
    assert "unrecognised-error" not in ids(rep)  # the agent's "failed (exitcode: -N)" line is read too


def test_the_innermost_frame_outside_the_users_code_is_named_too() -> None:
    crash = finding(report("segv_rank1_faulthandler.log"), "native-crash")
    assert "innermost: string_at in ctypes/__init__.py:519" in crash.message
    assert "the only rank torchrun's failure table says died of SIGSEGV" in crash.message


def test_a_prefixed_block_is_its_prefixs_rank_without_the_table() -> None:
    table = next(i for i, t in enumerate((REAL / "segv_rank1_prefixed.log").read_text().splitlines()) if "FAILED" in t)
    crash = finding(report("segv_rank1_prefixed.log", keep=table), "native-crash")
    assert crash.culprits == (1,) and crash.message.startswith("rank 1 crashed: Fatal Python error: Segmentation")


def test_a_block_cut_from_its_table_names_the_local_rank_and_pid_the_agent_gave() -> None:
    rep = report("segv_cut_before_table.log")
    crash = finding(rep, "native-crash")
    assert crash.ranks == () and crash.message.startswith("local rank 1 (pid 7814; its global rank is not in")
    child = finding(rep, "child-failed")
    assert "local rank 1 (pid 7814) died of SIGSEGV (exit code -11)" in child.message


def test_without_the_block_a_segfault_is_torchruns_table_only() -> None:
    # twin: the same run without faulthandler's lines gives no native-crash, only torchrun's summary
    lines = (REAL / "segv_rank1_faulthandler.log").read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith("Fatal Python error"))
    end = next(i for i, t in enumerate(lines) if t.startswith("Extension modules"))
    rep = analyse(frame_all(lines[:start] + lines[end + 1 :], "cut.log"))
    assert "native-crash" not in ids(rep) and rep.root_cause is not None and rep.root_cause.id == "child-failed"
    assert rep.root_cause.ranks == (1,) and "SIGSEGV" in rep.root_cause.message


def test_a_shells_report_of_a_segfault_is_a_crash_with_its_pid() -> None:
    crash = finding(report("shell_segfault.log"), "native-crash")
    assert "Segmentation fault (its shell reported it: ./shell_crash.sh line 4, pid 8801" in crash.message
    assert crash.ranks == () and "rank is not in these logs" in crash.message


def test_an_abort_outside_the_users_code_is_not_the_verdict() -> None:
    # real (M35, vLLM on ray): an abort with no Python frame beside the watchdog's CUDA error: the abort is torch's
    rep = analyse(frame_all(next((FIXTURES / "nccl_logs_more").glob("M35_*.log")).read_text().splitlines(), "m35"))
    crash = finding(rep, "native-crash")
    assert crash.severity == "warning" and crash.culprits == ()
    assert rep.root_cause is not None and rep.root_cause.id == "cuda-illegal-address"  # the watchdog's CUDA error


def test_sigkill_is_named_as_the_cause_with_what_cannot_be_told() -> None:
    rep = report("sigkill_rank1.log")
    assert rep.root_cause is not None and rep.root_cause.id == "child-failed" and rep.root_cause.ranks == (1,)
    assert "the host's OOM killer, a kill from outside" in rep.root_cause.message
    assert "these logs cannot tell which" in rep.root_cause.message and "native-crash" not in ids(rep)


def test_a_lone_child_failed_error_line_is_not_a_pass() -> None:
    rep = report("lone_child_failed_error.log")
    assert rep.root_cause is not None and rep.root_cause.id == "child-failed" and rep.root_cause.severity == "error"
    assert "its failure table is not in these logs" in rep.root_cause.message


def test_a_child_failed_error_with_its_table_is_the_tables_finding_only() -> None:
    child = finding(report("sigkill_rank1.log"), "child-failed")
    assert "failure table is not in these logs" not in child.message


def test_detail_fingerprints_name_the_odd_rank_out_of_three() -> None:
    found = finding(report("detail_shape_rank2_of3.log"), "collective-mismatch")
    assert found.culprits == (2,)
    assert "tensor shape: rank 2 has [2, 4] while ranks 0-1 have [4, 2]" in found.message
    assert "rank(s) 2 differ from the other ranks seen" in found.message and "dtype" not in found.message


def test_detail_fingerprints_of_two_ranks_say_the_tie() -> None:
    found = finding(report("detail_dtype_2ranks.log"), "collective-mismatch")
    assert found.culprits == () and "dtype: rank 0 has Float while rank 1 has Double" in found.message
    assert "with two ranks seen neither is the odd one out" in found.message and "tensor shape" not in found.message


def test_detail_fingerprints_of_different_collectives_keep_their_words() -> None:
    found = analyse(frame_all((FIXTURES / "torchrun" / "detail_mismatch_allreduce_vs_broadcast.log").read_text()
                              .splitlines(), "d.log")).root_cause  # fmt: skip
    assert found is not None and "rank 0 runs ALLREDUCE while rank 1 runs BROADCAST" in found.message
    assert found.culprits == ()


def test_gloos_wrong_size_names_the_rank_that_received_it() -> None:
    found = finding(report("gloo_size_abort.log"), "collective-mismatch")
    assert found.ranks == (0,) and "received 16 bytes where it expected 8 and aborted" in found.message
    assert finding(report("gloo_size_abort.log"), "process-aborted").ranks == (0,)


def test_a_size_mismatch_gloo_did_not_report_is_not_made_up() -> None:
    # the same all_reduce with fewer elements on rank 1: gloo closed the connection and said nothing of sizes
    assert "collective-mismatch" not in ids(report("gloo_size_silent.log"))


def test_a_dead_thread_of_a_prefixed_rank_is_the_cause_of_the_others_timeout() -> None:
    rep = report("thread_died_rank1_prefixed.log")
    dead = finding(rep, "thread-died")
    assert rep.root_cause == dead and dead.culprits == (1,)
    assert dead.message.startswith("rank 1's thread loader died with ValueError: corrupt shard 7 at step 1")
    assert "at thread_died.py:15 (load)" in dead.message
    assert "the others (rank(s) 0,2) then timed out (gloo-timeout)" in dead.message
    assert "they waited on rank 1" in dead.message


def test_a_dead_thread_without_a_prefix_is_only_likely_the_silent_ranks() -> None:
    rep = report("thread_died_rank1.log")
    dead = finding(rep, "thread-died")
    assert dead.culprits == () and dead.ranks == (1,)
    assert "most likely rank 1's (its lines carry no rank prefix, so this cannot be told for sure)" in dead.message
    assert "unrecognised-error" not in ids(rep)


def test_a_thread_that_died_without_a_hang_says_nothing_of_one() -> None:
    lines = (REAL / "thread_died_rank1_prefixed.log").read_text().splitlines()
    end = next(i for i, t in enumerate(lines) if "ValueError: corrupt" in t)
    dead = finding(analyse(frame_all(lines[: end + 1], "t.log")), "thread-died")
    assert "timed out" not in dead.message and dead.culprits == (1,)


@pytest.mark.parametrize(
    "name",
    [
        "port_held_init_process_group.log",
        "port_held_init_process_group_nolibuv.log",
        "port_held_torchrun_master_port.log",
        "../torchrun/store_port_in_use.log",
    ],
)
def test_a_held_store_port_is_named_in_every_wording(name: str) -> None:
    rep = report(name)
    assert rep.root_cause is not None and rep.root_cause.id == "store-port-in-use"
    port = "29655" if "store_port" in name else "29731"
    assert f"port {port} is already taken" in rep.root_cause.message and "no port" not in rep.root_cause.message


@pytest.mark.parametrize(
    ("name", "said", "nccl"),
    [
        ("M39", "its native backtrace (thread 25645): SaveProxy() at proxy.cc:518 <- ncclProxySaveOp()", True),
        ("M28", "its native backtrace (thread 5704): ncclGroupEnd()", True),
        ("M30", "its native backtrace (1a62e574072d:00334): in lmdb/cpython.cpython-36m-x86_64-linux-gnu.so", False),
    ],
)
def test_a_signal_handlers_backtrace_says_where_the_process_crashed(name: str, said: str, nccl: bool) -> None:
    """UCX's "==== backtrace" and Open MPI's "[ N] lib.so(+0x…)" frames, past the handler's own and the C library's:
    NCCL's proxy (M39) and group code (M28) are NCCL's; M30's bus error is in lmdb's mapped file, not NCCL."""
    (path,) = (FIXTURES / "nccl_logs_more").glob(f"{name}_*.log")
    rep = analyse(frame_all(path.read_text().splitlines(), name))
    crash = finding(rep, "native-crash")
    assert said in crash.message, crash.message
    assert ("inside NCCL's own code" in crash.message) is nccl


def test_a_crash_without_a_native_backtrace_claims_none() -> None:
    crash = finding(report("segv_rank1_faulthandler.log"), "native-crash")
    assert "native backtrace" not in crash.message


def test_a_shells_exit_status_is_an_echo_of_the_crash_before_it() -> None:
    """shell_segfault.log's second line is the script's own `echo "exit $?"`: 139, the segfault's echo."""
    rep = report("shell_segfault.log")
    status = finding(rep, "exit-status")
    assert "exit status 139" in status.message and status.severity == "error"
    assert rep.root_cause is not None and rep.root_cause.id == "native-crash"
    assert not [f for f in rep.findings if f.id == "unrecognised-error"]


@pytest.mark.parametrize("line", ["exit 0", "exited with code 0", "exit code 1 of 3 experts is routed", "exit 139 s"])
def test_an_exit_status_of_zero_or_inside_a_sentence_is_not_one(line: str) -> None:
    rep = analyse(frame_all([line], "x.log"))
    assert not any(f.id == "exit-status" for f in rep.findings)
