"""``ncclcheck logs`` on every real excerpt in tests/fixtures/nccl_logs (INDEX.md gives each one's cause)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import LogFold, analyse, quiet
from ncclcheck.analysis.logs.frame import fold_chunks, frame_all
from ncclcheck.analysis.logs.recording import fold_stream
from ncclcheck.cli import main
from ncclcheck.collectors.logfiles import LogSource, chunks
from ncclcheck.model.log_report import LogReport

LOGS = FIXTURES / "nccl_logs"
# (file number, root cause id or None for a healthy log, every finding id expected)
EXPECTED = [
    ("01", None, {"intra-node-net"}),
    ("02", None, set()),
    ("03", None, {"gdr-disabled"}),
    ("04", None, {"gdr-disabled"}),
    ("05", None, set()),
    ("06", None, set()),
    ("07", None, {"suspicious-interface", "p2p-disabled"}),
    ("08", None, set()),
    ("09", None, set()),
    ("10", None, set()),
    ("11", None, {"version-mismatch"}),
    ("12", None, set()),
    ("13", None, set()),
    ("14", None, set()),
    ("15", "ib-local-protection", {"ib-local-protection", "nccl-tests-failed"}),
    ("16", "ib-local-protection", {"ib-local-protection", "proxy-peer-closed"}),  # the service thread: information
    ("17", "ib-wr-flush", {"ib-wr-flush"}),
    ("18", "ib-retry-exceeded", {"ib-retry-exceeded", "ib-wr-flush"}),
    (
        "19",
        "ib-retry-exceeded",
        {"ib-retry-exceeded", "nccl-system-error", "peer-crashed", "process-aborted", "process-taken-down"},
    ),
    ("20", "ib-modify-qp-failed", {"ib-modify-qp-failed", "peer-closed", "proxy-failed"}),
    ("21", "ib-modify-qp-failed", {"ib-modify-qp-failed"}),
    ("22", None, {"ib-no-device"}),
    ("23", "no-socket-interface", {"nccl-system-error", "no-socket-interface"}),
    ("24", "address-family-mismatch", {"address-family-mismatch", "socket-ifname-not-found"}),
    ("25", "address-family-mismatch", {"address-family-mismatch"}),
    ("26", "connect-failed", {"connect-failed", "connect-retried", "ib-no-device", "suspicious-interface"}),
    ("27", "connect-failed", {"connect-failed", "connect-retried"}),  # NCCL retried, then gave up
    ("28", "connect-failed", {"connect-failed", "unrecognised-error"}),  # sglang: "Scheduler hit an exception"
    ("29", "connect-failed", {"connect-failed"}),
    ("30", "nccl-system-error", {"nccl-system-error"}),
    ("31", "connect-failed", {"connect-failed", "peer-closed", "proxy-failed"}),
    ("32", "peer-closed", {"peer-closed", "proxy-failed"}),
    ("33", "nccl-system-error", {"nccl-system-error", "peer-closed", "peer-crashed"}),
    ("34", "duplicate-gpu", {"duplicate-gpu"}),
    ("35", "duplicate-gpu", {"duplicate-gpu", "nccl-system-error"}),
    ("36", "shm-failure", {"shm-failure"}),
    ("37", "shm-failure", {"shm-failure"}),
    ("38", "cuda-oom", {"cuda-oom", "peer-closed", "proxy-failed"}),
    ("39", "cuda-oom", {"cuda-oom"}),
    ("40", "p2p-unsupported", {"nccl-system-error", "p2p-unsupported"}),
    ("41", "collective-timeout", {"collective-timeout"}),
    ("42", "collective-timeout", {"collective-timeout", "watchdog-exception"}),
    ("43", "collective-timeout", {"collective-timeout", "watchdog-stuck"}),
    ("44", "collective-timeout", {"collective-timeout", "process-taken-down"}),
    ("45", "collective-timeout", {"collective-timeout", "process-aborted"}),
    ("46", "store-connection-lost", {"store-connection-lost"}),
    ("47", "store-connect-failed", {"store-connect-failed"}),
    ("48", "store-connect-failed", {"store-connect-failed", "unrecognised-error"}),  # the launcher's own ERROR line
    ("49", "child-failed", {"child-failed"}),
    ("50", "child-failed", {"child-failed", "slurm-task-ended"}),
]


def fixture(number: str) -> Path:
    if not LOGS.is_dir():
        pytest.fail(f"fixture missing: {LOGS}")
    (path,) = LOGS.glob(f"{number}_*.log")
    return path


def report(number: str) -> LogReport:
    path = fixture(number)
    with path.open(encoding="utf-8", errors="replace") as handle:
        return analyse(frame_all(handle, path.name))


def test_every_fixture_has_an_expectation() -> None:
    if not LOGS.is_dir():
        pytest.fail(f"fixture missing: {LOGS}")
    assert sorted(p.name[:2] for p in LOGS.glob("*.log")) == [n for n, _, _ in EXPECTED]


@pytest.mark.parametrize(("number", "cause", "ids"), EXPECTED, ids=[n for n, _, _ in EXPECTED])
def test_fixture_findings(number: str, cause: str | None, ids: set[str]) -> None:
    got = report(number)
    assert {f.id for f in got.findings} == ids
    assert (got.root_cause.id if got.root_cause else None) == cause
    assert got.failed == (cause is not None)
    for finding in got.findings:
        assert finding.fix and (finding.evidence or finding.id == "child-failed"), finding


def _fold(text: Iterable[str], name: str, stream: bool) -> tuple[LogFold, int]:
    """A fold of chunks, into a LogFold directly or (as the command reads in one process) through a Recorder."""
    fold = LogFold()
    lines = fold_stream(text, name, fold) if stream else fold_chunks(text, name, quiet, fold)
    return fold, lines


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("size", [256, 4096])
def test_quiet_chunks_skipped_change_nothing(size: int, stream: bool) -> None:
    """The command's fast path (quiet chunks only counted) finds what the line-by-line fold finds, in the same lines."""
    for number, _, _ in EXPECTED:
        path = fixture(number)
        fold, _ = _fold(chunks(LogSource(path.name, str(path)), size), path.name, stream)
        fast, slow = fold.result(), report(number)
        assert fast.findings == slow.findings, number
        assert fast.ranks == slow.ranks and fast.timeouts == slow.timeouts and fast.failures == slow.failures, number
        assert fast.root_cause == slow.root_cause and fast.lines == slow.lines, number


def test_fixtures_inside_megabytes_of_training_output_give_the_same_report(tmp_path: Path) -> None:
    """Full-size chunks: the sampled gate, busy chunks judged again in pieces, line numbers across skipped ones."""
    steps = "".join(
        f"[rank{r % 8}]:step {r} | loss {r % 97 / 10:.2f} | lr 3.0e-04 | tokens/s {5000 + r}\n" for r in range(6000)
    )
    for number, _, _ in EXPECTED:
        text = steps + fixture(number).read_text(encoding="utf-8", errors="replace") + "\n" + steps
        log = tmp_path / f"{number}.log"
        log.write_text(text, encoding="utf-8")
        fold, _ = _fold(chunks(LogSource(log.name, str(log)), 1 << 20), log.name, stream=True)
        fast, slow = fold.result(), analyse(frame_all(text.splitlines(keepends=True), log.name))
        assert fast.findings == slow.findings and fast.root_cause == slow.root_cause, number
        assert fast.ranks == slow.ranks and fast.timeouts == slow.timeouts and fast.failures == slow.failures, number
        assert fast.lines == slow.lines, number


@pytest.mark.parametrize(
    ("line", "fid"),
    [
        ("node1:123:456 [0] misc/ibvwrap.cc:137 NCCL WARN Call to ibv_open_device failed", "ib-no-device"),
        ("node1:123:456 [0] include/alloc.h:103 NCCL WARN Failed to CUDA calloc 2097152 bytes", "cuda-oom"),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "model-oom",
        ),  # the allocator's message: the model's OOM, not NCCL's
        # gloo's tcp/pair.cc when a peer is gone: the first two as a real torch 2.13 run printed them, the
        # third in the format of its source (GLOO_ERROR_MSG("writev ", peer_.str(), ": ", strerror(errno))).
        (
            "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537]"
            " Read error [127.0.0.1]:15242: Connection reset by peer. This is typically caused by a remote worker",
            "peer-crashed",
        ),
        (
            "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
            " Connection closed by peer [127.0.0.1]:15242. This is typically caused by a remote worker hanging",
            "peer-crashed",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] writev [10.1.0.2]:7: Broken pipe",
            "peer-crashed",
        ),
    ],
)
def test_messages_whose_literal_is_not_the_rest_of_their_rule(line: str, fid: str) -> None:
    """Each alternative of a message has its own literal: none is gated out by another's."""
    assert fid in {f.id for f in analyse(frame_all([line], "x.log")).findings}


def test_repeated_lines_do_not_grow_what_is_kept() -> None:
    """Memory follows processes, not lines: the same GDR notice 5,000 times is kept once per HCA."""
    line = "6a5a91752e39:74352:74370 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA {} 'mlx5_{}' (no module)"
    got = analyse(frame_all([line.format(i % 2, i % 2) for i in range(5000)], "x.log"))
    (rank,) = got.ranks
    assert len(rank.gdr_disabled) == 2 and {f.id for f in got.findings} == {"gdr-disabled"}


def test_watchdog_timeouts_name_the_silent_ranks() -> None:
    got = report("41")
    assert sorted(t.rank for t in got.timeouts) == [1, 2, 3, 6, 7]
    assert {(t.seq, t.op) for t in got.timeouts} == {(469508, "ALLREDUCE")}
    assert got.root_cause is not None and "rank(s) 0,4-5 did not report it" in got.root_cause.message
    assert report("45").timeouts[0].numel_in == 7098994688  # 16-way reduce-scatter: rank 0-15 expected


def test_torchrun_summary_root_cause_is_the_first_failure() -> None:
    (finding,) = report("49").findings
    assert finding.ranks == (0,) and "SIGABRT" in finding.message and "rank(s) 1-2 failed too" in finding.message
    assert "ProcessGroupNCCL's abort" in finding.fix


def test_first_error_wins_over_its_echoes() -> None:
    got = report("16")
    assert got.root_cause is not None and got.root_cause.id == "ib-local-protection"
    assert "10.0.35.1" in got.root_cause.message


def test_cli_json_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--json", str(fixture("02"))]) == 0
    healthy = json.loads(capsys.readouterr().out)
    assert healthy["schema"] == "ncclcheck.logs/2" and healthy["verdict"]["status"] == "pass"
    assert healthy["flight_recorder"] is None and any(r["peers"] for r in healthy["ranks"])
    assert main(["logs", "--json", str(fixture("34"))]) == 1
    bad = json.loads(capsys.readouterr().out)
    assert bad["verdict"]["root_cause"] == "duplicate-gpu" and bad["findings"][0]["evidence"][0]["line"] > 0
    assert main(["logs", "/no/such/log"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_directory_and_gzip_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    (tmp_path / "rank0.log.gz").write_bytes(gzip.compress(fixture("18").read_bytes()))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rank1.log").write_bytes(fixture("41").read_bytes())
    assert main(["logs", "--json", str(tmp_path)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert len(out["files"]) == 2
    assert {f["id"] for f in out["findings"]} >= {"ib-retry-exceeded", "collective-timeout"}


# Lines the fast lanes take (NCCL headers, any line behind torchrun's prefix) mixed with what must leave them:
# a line a terminal's width long (it may take the next one), its rest, ANSI residue and CR, empty rests, nested
# prefixes, a line over MAX_LINE, errors and torchrun's summary.
TRICKY = [
    "[rank0]:node1:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "[rank1]:node1:13:14 [1] NCCL WARN Call to connect returned Connection refused, retrying",
    "node2:21:22 [3] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by remote peer",
    "node2:21:22 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>",
    "[rank2]:Traceback (most recent call last):",
    '[rank2]:  File "/work/train.py", line 41, in <module>',
    "[rank2]:RuntimeError: NCCL communicator was aborted on rank 2.",
    "[rank3]:",
    "[rank3]:   ",
    "[default4]:[rank4]:torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970",
    "[rank5]:\x1b[31mValueError: boom\x1b[0m",
    "[rank5]:node3:31:32 [0] NCCL INFO Using network IB\x1b[0m",
    "[rank5]:node3:31:32 [0] NCCL INFO Using network [0mSocket",
    "[rank6]:step 12 | loss 2.31\r",
    "[rank6]:node3:33:34 [1] NCCL INFO comm 0x55 rank 6 nranks 8 cudaDev 1 busId 1c000 commId 0x9 - Init START\r",
    "[rank7]:" + "w" * 72,  # 80 long: a terminal may have wrapped it
    "[rank7]:node4:41:42 [2] NCCL INFO " + "x" * (120 - 33),  # 120 long
    "ERROR: trailing rest of a wrapped line",
    # an NCCL line a 120-column terminal wrapped inside its message: only rejoined does it say "closed by remote peer"
    "[rank7]:node4.cluster.example.com:41:42 [2] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by"
    " remote pee\nr node5.cluster.example.com<45678>",
    "\n".join(  # torchrun's summary, a block of lines no other line interrupts
        [
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2024-01-01_00:00:00",
            "  host      : node4",
            "  rank      : 7 (local_rank: 2)",
            "  exitcode  : -6 (pid: 4242)",
            "=" * 60,
        ]
    ),
    "\n".join(  # Python's unraisable hook: an exception it ignored (a warning), then the rank's next line
        [
            "[rank2]:Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3c2a1b0d30>",
            "[rank2]:Traceback (most recent call last):",
            '[rank2]:  File "/usr/lib/python3.10/multiprocessing/process.py", line 160, in is_alive',
            "[rank2]:AssertionError: can only test a child process",
        ]
    ),
    "[rank1]:[1,4]<stdout>:node5:51:52 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "[1,2]<stdout>:node5:53:54 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
    "[rank0]:" + "y" * 70_000,
    "plain training output with nothing in it",
    # letters and digits beyond ASCII (the fast lane's header spells out ASCII's): framed as any other line
    "nöde7:71:72 [0] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by remote peer",
    "[rank٣]:node7:73:74 [1] NCCL WARN Call to connect returned Connection refused, retrying",
    "node7:７５:76 [２] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "",
]


@pytest.mark.parametrize("seed", range(6))
def test_the_fast_lanes_frame_every_line_as_the_line_by_line_reader_does(
    tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    import random

    pick = random.Random(seed)
    lines = "\n".join(pick.choice(TRICKY) for _ in range(3000)).split("\n")
    text = "\n".join(lines) + ("\n" if seed % 2 else "")
    log = tmp_path / "mixed.log"
    log.write_text(text, encoding="utf-8")
    for size, stream in itertools.product((1 << 20, 4096), (False, True)):
        fold, lines_read = _fold(chunks(LogSource(log.name, str(log)), size), log.name, stream)
        fast, slow = fold.result(), analyse(frame_all(text.splitlines(keepends=True), log.name))
        assert fast.findings == slow.findings and fast.root_cause == slow.root_cause, size
        assert fast.ranks == slow.ranks and fast.timeouts == slow.timeouts and fast.failures == slow.failures, size
        if stream:  # every line folded as the LogFold folds them: the last run of plain lines too
            assert fast == _fold(chunks(LogSource(log.name, str(log)), size), log.name, False)[0].result(), size
        assert lines_read == len(lines) - (seed % 2 == 0 and lines[-1] == ""), size  # what the report says it read
    assert main(["logs", "--json", str(log)]) in (1, 4)
    assert json.loads(capsys.readouterr().out)["lines"] == len(lines) - (seed % 2 == 0 and lines[-1] == "")
