"""Causes ``logs`` used to get wrong, on their real message formats: each where it must win and where it must not."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.cli import main
from ncclcheck.model.log_report import LogReport

# PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, torch >= 2.3 wording)
TORCH_OOM = (
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of"
    " 79.15 GiB of which 1.02 GiB is free. Process 4242 has 78.12 GiB memory in use."
)
NCCL_OOM = "node1:2211:2299 [1] include/alloc.h:114 NCCL WARN Cuda failure 2 'out of memory'"
# slurmstepd's task/cgroup plugin and srun, when the kernel OOM-kills a task of the step
SLURM_OOM = (
    "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
    "srun: error: node3: task 1: Out Of Memory",
)
PEER_CLOSED = (
    "node1:2211:2299 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node3<47362>"
)
# torch/distributed/elastic/multiprocessing/api.py: _terminate_process_handler
SIGTERM = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 39461 got signal: 15"
TIMEOUT = (
    "[rank0]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
    " ran for 600015 milliseconds before timing out."
)


def report(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "job.log"))


def cause(*lines: str) -> str | None:
    found = report(*lines).root_cause
    return found.id if found else None


def test_the_models_oom_is_not_ncclls() -> None:
    found = report(TORCH_OOM)
    assert cause(TORCH_OOM) == "model-oom" and "2.00 GiB" in found.findings[0].message
    assert "NCCL_BUFFSIZE" not in found.findings[0].fix
    assert cause(NCCL_OOM) == "cuda-oom" and "NCCL_BUFFSIZE" in report(NCCL_OOM).findings[0].fix


def test_slurms_oom_kill_is_the_cause_over_the_peers_echo() -> None:
    assert cause(PEER_CLOSED, *SLURM_OOM) == "host-oom-killed"
    assert cause(*SLURM_OOM) == "host-oom-killed"
    messages = [f.message for f in report(*SLURM_OOM).findings]
    assert any("task 1 on node3" in m for m in messages)
    assert cause(PEER_CLOSED) == "peer-closed"  # alone, the echo is all there is


def test_an_outside_sigterm_is_the_launcher_ended_and_never_beats_where_the_ranks_were() -> None:
    assert cause(SIGTERM) == "launcher-terminated"
    assert "ended from outside by signal 15" in report(SIGTERM).findings[0].message
    assert cause(SIGTERM, TIMEOUT) == "collective-timeout"
    assert cause(TIMEOUT, SIGTERM) == "collective-timeout"


def test_a_watchdog_that_died_on_a_closed_connection_is_read() -> None:
    line = (
        "[rank0]:[E1121 10:00:00.000 ProcessGroupNCCL.cpp:1000] [PG 0 Rank 0] Process group watchdog thread"
        " terminated with exception: Connection closed by peer"
    )
    assert cause(line) == "peer-closed"


def test_two_processes_with_one_rank_are_named() -> None:
    # NCCL src/bootstrap.cc bootstrapRoot, unchanged from 2.12 to 2.30
    line = "node0:4242:4300 [0] NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in"
    found = report(line).findings
    assert [f.id for f in found] == ["duplicate-rank"] and "two processes claim global rank 1 (of 8)" in found[
        0
    ].message
    mismatch = "node0:4242:4300 [0] NCCL WARN Bootstrap Root : mismatch in rank count from procs 16 : 8"
    assert cause(mismatch) == "nranks-mismatch" and "16 vs 8" in report(mismatch).findings[0].message
    checked_in = "node0:4242:4300 [0] NCCL INFO Bootstrap Root : rank 1 of 8 ranks checked in"  # healthy INFO
    assert report(checked_in).findings == ()


GLOO_JOB = FIXTURES / "torchrun" / "gloo_timeout_rank2_stuck.log"


def test_gloos_timeout_names_the_rank_that_did_not_time_out() -> None:
    lines = GLOO_JOB.read_text().splitlines()
    found = report(*lines).root_cause
    assert found is not None and found.id == "gloo-timeout"
    assert found.culprits == (2,) and found.ranks == (0, 1, 2)  # rank 2 is known from torchrun's failure table
    assert "reported by rank(s) 0-1; rank(s) 2 did not report it" in found.message


def test_a_partial_log_with_one_ranks_lines_blames_nobody_it_does_not_show() -> None:
    rank1 = [line for line in GLOO_JOB.read_text().splitlines() if line.startswith("[default1]:")]
    found = report(*rank1).root_cause
    assert found is not None and found.id == "gloo-timeout" and found.culprits == ()
    assert "rank(s) 0 did not report it (no line of theirs is in these logs" in found.message
    assert "rank(s) 2" not in found.message  # nothing in rank 1's lines implies a rank 2


def test_nccl_timeouts_from_a_partial_log_invent_no_culprit() -> None:
    only = TIMEOUT.replace("Rank 0]", "Rank 5]").replace("[rank0]", "[rank5]")
    found = report(only).root_cause
    assert (
        found is not None
        and found.culprits == ()
        and "rank(s) 0-4 did not report it (no line of theirs" in found.message
    )
    assert found.blamed == ()  # the verdict's header names no rank: the one that timed out only waited


def test_a_detail_mismatch_is_one_finding_with_both_call_sites() -> None:
    log = FIXTURES / "torchrun" / "detail_mismatch_allreduce_vs_broadcast.log"
    found = report(*log.read_text().splitlines()).root_cause
    assert found is not None and found.id == "collective-mismatch" and found.ranks == (0, 1)
    assert "rank 0 runs ALLREDUCE while rank 1 runs BROADCAST" in found.message
    assert "rank 1 runs BROADCAST while rank 0" not in found.message  # each side reports it: said once
    assert "call sites: rank 0 at detail_mismatch.py:5 (train_step); rank 1 at detail_mismatch.py:9 (sync_params)" in (
        found.message
    )


# torch/csrc/distributed/c10d/TraceUtils.h retrieveDesyncReport (TORCH_NCCL_DESYNC_DEBUG=1)
DESYNC = [
    TIMEOUT.replace("SeqNum=12", "SeqNum=183"),
    "[rank0]: - [0] Timeout at collective: ALLREDUCE, #183",
    "[rank0]: - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
    "[rank0]:   - [7] finished collective #182, but didn't join collective #183 (count from 1)",
]


def test_the_desync_report_names_the_culprit_over_the_timeout() -> None:
    found = report(*DESYNC).root_cause
    assert found is not None and found.id == "desync-report" and found.culprits == (7,)
    assert "rank(s) 7 finished collective #182 but never joined #183" in found.message
    lagging = "[rank3]: - To our best knowledge, ranks [47, 48] are the lagging ranks that caused this timeout."
    assert report(TIMEOUT, lagging + " They never joined any collectives").root_cause.culprits == (47, 48)  # type: ignore[union-attr]
    assert cause(*DESYNC[:2]) == "collective-timeout"  # no report: the timeout stays the cause


def test_the_flight_recorders_stack_in_the_watchdog_message_gives_the_call_site() -> None:
    lines = [
        TIMEOUT,
        "[rank0]:[E1121 10:00:00.000 ProcessGroupNCCL.cpp:667] Stack trace of the failed collective: ",
        "[rank0]:#0 all_reduce from /env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2501",
        "[rank0]:#1 wrapper from /env/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83",
        "[rank0]:#2 train_step from /job/train.py:88",
        "[rank0]:#3 <module> from /job/train.py:120",
    ]
    site = next(f for f in report(*lines).findings if f.id == "failed-collective-site")
    assert "called from /job/train.py:88 (train_step)" in site.message and site.ranks == (0,)
    assert site.evidence[0].text.startswith("#2 train_step")
    off = (
        TIMEOUT
        + "\n"
        + (
            "[rank0]:[E1121 10:00:00.000 ProcessGroupNCCL.cpp:667] Stack trace of the failed collective not found,"
            " potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE"
            " to a non-zero value."
        )
    )
    notes = [f for f in report(*off.split("\n")).findings if f.id == "failed-collective-no-stack"]
    assert notes and "Flight Recorder was off" in notes[0].message and notes[0].severity == "error"
    alone = report(off.split("\n")[-1])  # printed only after a collective failed: alone, never a pass
    assert alone.status == "fail" and alone.root_cause is not None


CUDA_INVALID = "node1:2211:2299 [0] include/alloc.h:114 NCCL WARN Cuda failure 1 'invalid argument'"


def test_cuda_errors_inside_nccl_get_their_known_causes() -> None:
    found = report(CUDA_INVALID).findings[0]
    assert found.id == "cuda-error" and "NCCL_CUMEM_ENABLE=0" in found.fix and "set_device(local_rank)" in found.fix
    ordinal = "node1:2211:2299 [0] enqueue.cc:100 NCCL WARN Cuda failure 'invalid device ordinal'"
    assert "CUDA_VISIBLE_DEVICES" in report(ordinal).findings[0].fix
    assert cause("node1:2211:2299 [1] include/alloc.h:114 NCCL WARN Cuda failure 2 'out of memory'") == "cuda-oom"


def test_libfabric_plugin_errors_are_decoded() -> None:
    # aws-ofi-nccl: NCCL_OFI_WARN("Couldn't open a fabric provider. RC: %d, ERROR: %s", ret, fi_strerror(-ret))
    line = (
        "ip-10-0-0-1:2211:2299 [0] nccl_net_ofi_rdma.cpp:7000 NCCL WARN NET/OFI Couldn't open a fabric provider."
        " RC: -61, ERROR: No data available"
    )
    found = report(line).findings[0]
    assert found.id == "ofi-error" and "Couldn't open a fabric provider: No data available (RC -61)" in found.message
    info = "ip-10-0-0-1:2211:2211 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)"
    assert report(info).findings == ()


def test_nccl_ras_reports_name_dead_ranks_and_count_mismatches_are_not_hangs_alone() -> None:
    dead = report("The missing rank: 21", "1 job process is considered dead (unreachable via the RAS network)")
    assert dead.root_cause is not None and dead.root_cause.id == "ras-dead-rank" and dead.root_cause.culprits == (21,)
    counts = report("  Communicator ranks have different AllGather operation counts").findings
    assert [f.severity for f in counts] == ["warning"] and "normal while the job runs" in counts[0].message


def test_newer_nccl_formats_and_retries() -> None:
    """NCCL 2.27-2.30 wordings are read; a retry NCCL logs at INFO and an INFO about providers are not failures."""
    ib = (
        "node3:999:1010 [2] transport/net_ib/common.cc:120 NCCL WARN NET/IB: Got completion from peer 10.0.0.5<46202>"
        " with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.0.0.3 hca mlx5_0"
    )
    assert cause(ib) == "ib-retry-exceeded"
    assert (
        cause(
            "node3:9:10 [2] misc/socket.cc:600 NCCL WARN ncclSocketConnect: connect to 10.0.0.2<12345> failed :"
            " Connection refused"
        )
        == "connect-failed"
    )
    assert cause("slurmstepd: error: Detected 2 oom-kill event(s) in StepId=12.0 cgroup.") == "host-oom-killed"
    assert report("[rank0]:\t - [0, 1, 2] joined but didn't finish collective #3 (count from 1)").findings[
        0
    ].culprits == (
        0,
        1,
        2,
    )
    retry = (
        "node1:1:2 [0] NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr"
        " state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID ::ffff:10.0.0.2,"
        " retrying 1/7 after 100 msec of sleep"
    )
    assert report(retry).findings == ()
    assert report("ip-1:22:33 [0] NCCL INFO NET/OFI No eligible providers were found").findings == ()
    framed = (
        "node1:1:2 [0] misc/socket.cc:50 (socketProgress) NCCL WARN socketProgress: Connection closed by remote peer"
    )
    assert cause(framed + " node3<47362>") == "peer-closed"  # NCCL 2.30's 'file:line (func)' header


# NCCL 2.2x retrying a bootstrap connect, then giving up: the lines of a public issue's log (host shortened)
RETRIES = tuple(
    f"vae-0:10209:10243 [1] NCCL INFO socketPollConnect: connect returned Connection refused, retrying ({i}/34)"
    f" after sleep for {i * 100} msec"
    for i in range(1, 35)
)
GAVE_UP = (
    "[2025-05-16 10:49:23] vae-0:10209:10243 [1] misc/socket.cc:544 NCCL WARN socketPollConnect: connect returned"
    " Connection refused, exceeded error retry count (35)"
)


def test_a_connect_that_gives_up_after_its_retries_is_the_cause_and_retries_alone_are_not() -> None:
    early = report(*RETRIES[:33])  # retrying, then (the log ends) perhaps connected: information, no failure
    assert {f.id for f in early.findings} == {"connect-retried"} and early.status == "pass"
    last = report(*RETRIES)  # NCCL's last retry (34/34): the connection is failing (issue 35), not a pass
    assert last.root_cause is not None and last.root_cause.id == "connect-failed" and last.status == "fail"
    gave_up = report(*RETRIES, GAVE_UP, "vae-0:10209:10243 [1] NCCL INFO misc/socket.cc:635 -> 6")
    assert gave_up.root_cause is not None and gave_up.root_cause.id == "connect-failed"
    assert "gave up" in gave_up.root_cause.message and "Connection refused" in gave_up.root_cause.message
    assert gave_up.status == "fail"
    newer = (
        "tpgds-aihub0003:2387398:2387398 [3] os/linux.cc:200 NCCL WARN ncclOsSocketPollConnect: connect to"
        " 10.82.101.249<37857> returned Connection refused, exceeded error retry count after 35 attempts"
    )
    assert "10.82.101.249:37857" in report(newer).findings[0].message
    accept = "n1:1:2 [0] misc/socket.cc:470 NCCL WARN socketTryAccept: exceeded error retry count after 35 attempts, Connection reset by peer"
    assert cause(accept) == "connect-failed" and "Connection reset by peer" in report(accept).findings[0].message


def test_a_send_to_a_dead_peer_is_an_echo_and_calloc_async_is_nccl_running_out_of_memory() -> None:
    send = (
        "n1:1:2 [0] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to send to 10.0.0.2<45763> failed : Broken pipe"
    )
    assert cause(send) == "peer-closed"
    assert cause(send, NCCL_OOM) == "cuda-oom"  # the peer's echo never wins over a primary error
    calloc = "n1:1:2 [0] include/alloc.h:259 NCCL WARN Failed to CUDA calloc async 2432 bytes"
    assert cause(send, calloc) == "cuda-oom"


RAS = FIXTURES / "ras"


def test_ras_all_ok_is_said_and_beside_a_timeout_points_below_the_python_code() -> None:
    healthy = report(*(RAS / "healthy_32gpu_status.txt").read_text().splitlines())
    (ok,) = healthy.findings
    assert ok.id == "ras-all-ok" and ok.severity == "info" and healthy.status == "pass"
    assert "32 ranks" in ok.message and "SeqNum" not in ok.message  # no timeout: nothing to say about one
    hung = report(*(RAS / "ok_while_torch_timed_out_nccl2262.log").read_text().splitlines())
    ras = next(f for f in hung.findings if f.id == "ras-all-ok")
    assert "SeqNum 2398459" in ras.message and "did not finish" in ras.message
    assert hung.root_cause is not None and hung.root_cause.id == "collective-timeout"  # RAS informs, never blames
    assert ras.culprits == ()


def test_a_ras_row_with_errors_is_not_all_ok() -> None:
    for errors in ("MISMATCH", "INCOMPLETE", "INCOMPLETE,ERROR,MISMATCH"):
        row = f"    0         1         4       7-8        32        32   RUNNING  {errors}"
        assert "ras-all-ok" not in {f.id for f in report(row).findings}, errors
    assert report("    0         1         4         8        32        32      INIT      OK").findings == ()


def test_a_cause_over_many_ranks_names_them_as_ranges(tmp_path: Path) -> None:
    """120 of 128 ranks report a timeout: the header names the 8 suspects as one range, not 8 numbers (nor 120)."""
    lines = [
        f"node{r // 8}:{1000 + r}:{1000 + r} [{r % 8}] NCCL INFO comm 0x{r:x} rank {r} nranks 128 cudaDev {r % 8}"
        f" busId {r:x}000 commId 0x1 - Init COMPLETE"
        for r in range(128)
    ] + [TIMEOUT.replace("[rank0]:", f"[rank{r}]:").replace("Rank 0]", f"Rank {r}]") for r in range(8, 128)]
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["logs", str(log)]) == 1
    header = out.getvalue().splitlines()[0]
    assert header.startswith("✗ root cause (rank 0-7): collective ALLREDUCE (SeqNum 12) timed out"), header


def _init(rank: int, nranks: int, comm: str, pid: int = 100, dev: int = 5) -> tuple[str, ...]:
    """NCCL 2.2x's Init lines of one communicator of one process (init.cc, ncclCommInitRank)."""
    head = f"node1:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRank comm 0x{comm} rank {rank} nranks {nranks} cudaDev"
    tail = f" {dev} nvmlDev {dev} busId 90000 commId 0x{comm}77aa"
    return (
        f"{head}{tail} - Init START",
        f"node1:{pid}:{pid} [{dev}] NCCL INFO comm 0x{comm} rank {rank} nRanks {nranks} nNodes 1 localRanks"
        f" {nranks} localRank {rank} MNNVL 0",
        f"{head}{tail} localSize {nranks} - Init COMPLETE",
    )


CONNECT = (
    "node1:100:100 [5] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.1<43123> failed :"
    " Software caused connection abort"
)


def test_a_process_with_a_subgroup_is_named_by_its_global_rank() -> None:
    """Global rank 5 of 8 also sets up a 2-rank subgroup (tensor parallel), where it is rank 1: its error is rank
    5's, whichever communicator came first; its prefix's rank, when a launcher gave one, is the global rank."""
    world, pair = _init(5, 8, "a1"), _init(1, 2, "b2")
    for lines in ((*world, *pair, CONNECT), (*pair, *world, CONNECT)):
        got = report(*lines)
        assert [(r.rank, r.nranks) for r in got.ranks] == [(5, 8)]
        assert got.root_cause is not None and got.root_cause.ranks == (5,), got.root_cause
    alone = report(*_init(3, 8, "a1", dev=3), CONNECT.replace("[5]", "[3]"))  # one communicator: its rank
    assert [(r.rank, r.nranks) for r in alone.ranks] == [(3, 8)] and alone.root_cause
    assert alone.root_cause.ranks == (3,)
    prefixed = report(*(f"[rank5]:{line}" for line in (*pair, CONNECT)))  # only the subgroup's Init is here
    assert [r.rank for r in prefixed.ranks] == [5] and prefixed.root_cause and prefixed.root_cause.ranks == (5,)


def _job(tmp: Path, name: str, comm: str, nranks: int, timed_out: range, version: str, per_rank: bool) -> None:
    """A job's NCCL_DEBUG=INFO logs: every rank sets up the world communicator (and a 2-rank subgroup); the ranks
    in ``timed_out`` report the watchdog's timeout. One file per rank, or one for the whole job."""
    files: dict[str, list[str]] = {}
    for r in range(nranks):
        head = f"[rank{r}]:{name}{r // 8}:{1000 + r}:{1000 + r} [{r % 8}] NCCL INFO"
        files.setdefault(f"{name}-rank{r}.log" if per_rank else f"{name}.log", []).extend(
            [
                f"{head} NCCL version {version}+cuda12.4",
                f"{head} ncclCommInitRank comm 0x{r:x} rank {r} nranks {nranks} cudaDev {r % 8} busId {r:x}000"
                f" commId 0x{comm} - Init COMPLETE",
                f"{head} ncclCommInitRank comm 0x{r:x}f rank {r % 2} nranks 2 cudaDev {r % 8} busId {r:x}000"
                f" commId 0x{comm}{r // 2}f - Init COMPLETE",
                f"[rank{r}]:step 100 | loss 2.31",
            ]
            + [TIMEOUT.replace("[rank0]:", f"[rank{r}]:").replace("Rank 0]", f"Rank {r}]")] * (r in timed_out)
        )
    for file, lines in files.items():
        (tmp / file).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _diagnosed(path: Path) -> LogReport:
    from ncclcheck.collectors.logfiles import sources
    from ncclcheck.sources.logs import diagnose

    return diagnose(sources([str(path)]), cores=1)


def test_two_jobs_in_one_directory_are_not_compared_rank_by_rank(tmp_path: Path) -> None:
    """Job a (4 ranks, rank 3 silent) timed out; job b (8 ranks, another NCCL) is healthy. Its ranks 4-7 are not
    suspects of job a's timeout, nor is their NCCL a version mismatch: the logs are said to hold two jobs."""
    _job(tmp_path, "a", "a1", 4, range(3), "2.21.5", per_rank=True)
    _job(tmp_path, "b", "b2", 8, range(0), "2.20.3", per_rank=False)
    got = _diagnosed(tmp_path)
    ids = {f.id for f in got.findings}
    assert "several-jobs" in ids and "version-mismatch" not in ids, ids
    (timeout,) = [f for f in got.findings if f.id == "collective-timeout"]
    assert timeout.culprits == () and "cannot be told across them" in timeout.message, timeout
    several = next(f for f in got.findings if f.id == "several-jobs")
    assert "2 different jobs" in several.message and "a-rank0.log" in several.message and "b.log" in several.message
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["logs", str(tmp_path)]) == 1
    assert out.getvalue().startswith("✗ root cause: collective ALLREDUCE (SeqNum 12) timed out"), out.getvalue()


def test_one_jobs_files_with_subgroups_are_one_job(tmp_path: Path) -> None:
    """Every rank in its own file, each also in its own 2-rank subgroup: one job (the world communicator's id
    is in every file); rank 3 is the suspect, as before. Its torchrun console, with no commId, changes nothing."""
    _job(tmp_path, "a", "a1", 4, range(3), "2.21.5", per_rank=True)
    (tmp_path / "console.log").write_text("[rank3]:step 101 | loss 2.30\n", encoding="utf-8")
    got = _diagnosed(tmp_path)
    assert "several-jobs" not in {f.id for f in got.findings}
    (timeout,) = [f for f in got.findings if f.id == "collective-timeout"]
    assert timeout.culprits == (3,), timeout
    assert got.root_cause is not None and got.root_cause.id == "collective-timeout"


def test_two_healthy_jobs_read_together_pass_with_the_warning(tmp_path: Path) -> None:
    """Two jobs that both finished: told apart (a warning), never an error; the versions of two jobs' NCCL
    builds are not a mismatch."""
    _job(tmp_path, "a", "a1", 4, range(0), "2.21.5", per_rank=True)
    _job(tmp_path, "b", "b2", 8, range(0), "2.20.3", per_rank=False)
    got = _diagnosed(tmp_path)
    assert got.root_cause is None and {f.id for f in got.findings} == {"several-jobs"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["logs", str(tmp_path)]) == 0
    assert out.getvalue().startswith("! no error, but warnings below"), out.getvalue()
