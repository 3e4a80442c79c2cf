"""``ncclcheck logs`` over real NCCL evidence from an H100 (``make gpu-check``, tests/fixtures/gpu_check): two ranks
on one GPU under ``ncclcheck run``, each case a hang of a known cause, read back as a user reads a run's directory
(its logs, NCCL_DEBUG files, Flight Recorder dumps, hang records, and the console a tee kept). ``timing/`` holds two
cases recorded again with TORCH_NCCL_ENABLE_TIMING=1 and a 20 s process-group timeout.

Each case must name the rank the worker makes fail, and never the rank that only waited on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs import events
from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.verdict import with_hangs
from ncclcheck.collectors import hang_records
from ncclcheck.collectors.logfiles import Reading, sources
from ncclcheck.model.log_report import LogReport
from ncclcheck.sources.logs import diagnose

GPU = FIXTURES / "gpu_check"


def judge(*paths: Path) -> LogReport:
    """What ``ncclcheck logs PATH...`` decides (commands/logs.run without the rendering)."""
    reading = Reading()
    names = [str(p) for p in paths]
    return with_hangs(diagnose(sources(names, reading), reading, cores=1), hang_records.find(names))


def read(text: str, name: str = "console.log") -> LogReport:
    return analyse(list(frame_all(text.splitlines(), name)))


@pytest.mark.parametrize(
    ("case", "cause", "culprits"),
    [
        ("skip", "fr-not-joined", (1,)),  # rank 1 skips an all_reduce; rank 0 waits at .item()
        ("before", "fr-not-joined", (1,)),  # rank 1 sleeps in Python before it
        ("dies", "child-failed", ()),  # rank 1 exits with code 3 (names itself by its ranks, below)
        ("mismatch", "fr-op-mismatch", ()),  # all_reduce against broadcast: a tie the dumps cannot break
        ("timing/sleep", "fr-not-started", (1,)),  # rank 1's GPU busy with a long kernel before its all_reduce
        ("timing/p2p", "fr-p2p-unmatched", (0, 1)),  # both recv first: a cycle
    ],
)
def test_each_recorded_nccl_hang_names_its_cause(case: str, cause: str, culprits: tuple[int, ...]) -> None:
    report = judge(GPU / case)
    found = report.root_cause
    assert found is not None and found.id == cause, found
    assert found.culprits == culprits, found
    if case == "dies":
        assert found.ranks == (1,) and "exit code 3" in found.message, found
    if case == "timing/p2p":  # the live record (run with the fix) says the same
        assert "cycle (0 → 1 → 0)" in found.message, found


@pytest.mark.parametrize("case", ["p2p", "timing/p2p"])
def test_the_flight_recorder_alone_names_a_send_recv_deadlock_whose_recvs_read_completed(case: str) -> None:
    """Each rank's recv from the other read "completed", never retired: logs said "no problem found" over them."""
    found = judge(GPU / case / "run" / "fr").root_cause
    assert found is not None and found.id == "fr-p2p-unmatched" and found.culprits == (0, 1), found


def test_the_rank_that_exited_first_is_the_cause_not_the_rank_whose_peer_went_away() -> None:
    """dies: rank 0's NCCL "remote process exited", "Connection closed by remote peer" (2.28's words, no address)
    and its watchdog's error are what rank 1's exit caused; torchrun's table says rank 1 failed first, code 3."""
    report = judge(GPU / "dies")
    assert report.root_cause is not None and report.root_cause.ranks == (1,), report.root_cause
    ids = {f.id for f in report.findings}
    assert "peer-closed" in ids and "unrecognised-error" not in ids, ids
    echoes = [f for f in report.findings if f.id == "child-failed"]
    assert echoes and "other agents' tables" not in echoes[0].message  # one table, in run.out and launcher.log


DIED_FIRST = """\
[rank0]:[E1127 17:32:05.393768422 ProcessGroupNCCL.cpp:612] [Rank 0] Collective WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=300000) raised the following async exception: NCCL error: remote process exited or there was a network error, NCCL version 2.28.9
[rank0]: {own}
E1127 17:32:05.484000 1605 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 3) local_rank: 1 (pid: 1632) of binary: /usr/bin/python3
Failures:
[1]:
  time      : 2026-11-27_17:32:05
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 1631)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_17:32:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {first} (pid: 1632)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""
LOST = "ncclRemoteError: remote process exited"


def died_first(first: str, code: str = "-15", own: str = LOST, text: str = DIED_FIRST) -> str:
    """torchrun's table: rank 1 exits ``first`` first, rank 0 (its own line ``own``) with ``code`` after it."""
    return text.format(own=own, code=code, first=first)


def test_must_not_the_first_exit_outranks_an_error_of_the_other_rank_s_own_or_an_agent_s_stop() -> None:
    lost = read(died_first("3")).root_cause
    assert lost is not None and lost.ranks == (1,), lost
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    alone = DIED_FIRST.replace(DIED_FIRST.splitlines()[0] + "\n", "")  # rank 0 says nothing of a lost peer
    own = read(died_first("3", code="1", own=oom, text=alone)).root_cause
    assert own is not None and own.ranks == (0,) and own.id != "child-failed", own  # rank 0's own error stays
    stopped = read(died_first("-15"))
    assert stopped.root_cause is not None and stopped.root_cause.id != "child-failed", stopped.root_cause


OURS = """\
✗ nccl-system-error (rank 0): NCCL failed: remote process exited or there was a network error
  fix: read the 'Last error' line and the first NCCL WARN before it; if it is empty, rerun with NCCL_DEBUG=INFO
✗ hang (rank 1): process group 0 (default_pg), collective #4: rank 1 never issued it
! unrecognised-error (rank 1): a line ncclcheck has no rule for says it is an error: Segmentation fault
error peer-closed [ranks 0]: Connection reset by peer sending to 192.0.2.2: the remote process died
evidence ./run.out:21: [E1127 17:32:05.393768422 ProcessGroupNCCL.cpp:612] [Rank 0] Watchdog caught collective operation timeout
exit code 1; report: /tmp/run/report.json
ncclcheck run: evidence in /tmp/run
"""


def test_ncclcheck_s_own_report_lines_in_a_teed_console_are_not_evidence() -> None:
    report = read(OURS)
    assert report.root_cause is None and not report.findings and not report.unrecognised, report.findings


@pytest.mark.parametrize(
    "line",
    [
        "✗ torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",  # a mark, then no id of ours
        "! RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
        "  fixing: Segmentation fault (core dumped)",
        "error: RuntimeError: CUDA error: an illegal memory access was encountered",
        "error data-loader: RuntimeError: CUDA error: an illegal memory access was encountered",  # a logger's name
    ],
)
def test_must_not_a_user_s_line_that_looks_a_little_like_ours_is_dropped(line: str) -> None:
    assert not events.own(line), line
    assert read(line).findings or read(line).unrecognised, line


def test_the_stack_header_of_the_failed_collective_is_not_an_unrecognised_error() -> None:
    said = "[rank0]:[E1127 17:31:18.941708674 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: "
    assert not read(said).unrecognised and not read(said.rstrip()).unrecognised


def test_must_not_the_first_exit_leads_where_a_line_of_no_known_rank_says_a_peer_went_away() -> None:
    """Rank 1 exits 1 first, but a line of no known rank (NCCL's own prefix, pid 1632: rank 1's) says its peer went
    away too: the start may be on another node; the first exit is not promoted over the others' errors."""
    unranked = "nodeA:1632:1699 [0] transport/net_socket.cc:560 NCCL WARN socketProgress: Connection closed by remote peer nodeB<45678>"
    lines = died_first("1").splitlines()
    cause = read("\n".join([*lines[:2], unranked, *lines[2:]])).root_cause
    assert cause is not None and cause.id != "child-failed", cause


def test_the_readme_quotes_what_run_printed_on_the_h100_as_it_printed_it() -> None:
    quoted = [line for line in (GPU.parents[2] / "README.md").read_text().splitlines() if "nccl_gpu.py" in line]
    printed = (GPU / "timing" / "p2p" / "run.out").read_text().splitlines()
    assert quoted and all(line in printed for line in quoted), quoted
