"""The reader's shortcuts (issue 35: settled lines handed on at once, the plain lines of a fold counted inline) read
every line as the line-by-line reader does: the same findings, ranks, timeouts and failures, on every real excerpt
and on the line shapes the rejoiner glues."""

from __future__ import annotations

import random

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import LogFold, analyse, quiet
from ncclcheck.analysis.logs.frame import _settled, fold_chunks, frame_all
from ncclcheck.analysis.logs.recording import fold_stream
from ncclcheck.model.log_report import LogReport

EXCERPTS = sorted(FIXTURES.rglob("*.log"))


def _read(text: str, size: int, stream: bool) -> LogReport:
    """``text`` read by the command's reader in chunks of whole lines of about ``size`` characters."""
    pieces, piece = [], ""
    for line in text.splitlines(keepends=True):
        piece += line
        if len(piece) >= size:
            pieces.append(piece)
            piece = ""
    fold = LogFold()
    if stream:
        fold_stream([*pieces, piece], "x.log", fold)
    else:
        fold_chunks([*pieces, piece], "x.log", quiet, fold)
    return fold.result()


def _same(text: str, size: int = 1 << 20, stream: bool = False) -> LogReport:
    fast, slow = _read(text, size, stream), analyse(frame_all(text.splitlines(), "x.log"))
    assert fast.findings == slow.findings and fast.root_cause == slow.root_cause
    assert fast.ranks == slow.ranks and fast.timeouts == slow.timeouts and fast.failures == slow.failures
    return fast


def test_the_corpus_has_excerpts() -> None:
    assert len(EXCERPTS) > 100, FIXTURES  # the fixtures are missing: the test below would read nothing


@pytest.mark.parametrize("stream", [False, True])
def test_every_real_excerpt_reads_as_the_line_by_line_reader_reads_it(stream: bool) -> None:
    for path in EXCERPTS:
        text = path.read_text(errors="replace")
        try:
            _same(text, 1 << 20, stream)
        except AssertionError as exc:
            raise AssertionError(path) from exc


# What the rejoiner glues, each before a settled line that it must glue on (a wrap's rest, a cut's rest) or must not
SETTLED = "node5.cluster.example.com<45678>"  # a short line with no header: a wrap's rest, when it follows one
WRAPPED_WARN = (  # 120 wide: a terminal may have wrapped it, its rest follows
    "node4.cluster.example.com:41:42 [2] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by remote"
    " peer x"
).ljust(120, "x")
CUT_OPEN = (  # a paste cut inside parentheses, at no terminal's width
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(S"
)
CUT_REST = "eqNum=1522789, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600332 milliseconds before timing out."
CRI_PART = "2024-11-28T07:42:14.123456789Z stderr P RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
CRI_LAST = "2024-11-28T07:42:14.123456790Z stderr F system error (run with NCCL_DEBUG=INFO for details)"
SHAPES = [
    WRAPPED_WARN,
    SETTLED,
    CUT_OPEN,
    CUT_REST,
    CRI_PART,
    CRI_LAST,
    "node7: [rank2]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2.",
    "node7: plain training output, step 12",
    "",
    "   ",
    "Traceback (most recent call last):",
    'File "/work/train.py", line 41, in <module>',
    "RuntimeError: NCCL communicator was aborted on rank 2.",
    "ERROR: trailing rest of a wrapped line",
]  # no fast-lane NCCL line: a CRI log has none (every line is a record), and that lane's mix is test_logs_fixtures'


def test_a_settled_line_after_a_wrapped_one_is_still_its_rest() -> None:
    """Must glue: the WARN a 120-column terminal wrapped says "closed by remote peer" only with its rest."""
    text = f"{WRAPPED_WARN}\n{SETTLED}\n"
    assert _settled(SETTLED) != ()  # the line takes the fast way, and still joins the line before it
    report = _same(text)
    (finding,) = [f for f in report.findings if f.id == "peer-closed"]
    assert finding.evidence[0].text.endswith(SETTLED)
    apart = _same(f"{WRAPPED_WARN}\n\n{SETTLED}\n")  # must not glue: a blank line ends the line before
    (finding,) = [f for f in apart.findings if f.id == "peer-closed"]
    assert finding.evidence[0].text.endswith("x") and finding.evidence[0].line == 1


def test_the_rest_of_a_paste_cut_inside_parentheses_is_still_glued() -> None:
    """Must glue: the watchdog's timeout is read whole only when the cut's rest joins it."""
    report = _same(f"{CUT_OPEN}\n{CUT_REST}\n")
    assert [t.seq for t in report.timeouts] == [1522789]


def test_a_line_after_a_cri_part_keeps_its_place() -> None:
    """Must not reorder: a settled line after a CRI record's part is handed on in file order, the part's record
    when its last part comes."""
    report = _same(f"{CRI_PART}\nnode7: plain output\n{CRI_LAST}\nRuntimeError: boom after it\n")
    assert report.findings  # the joined record's error and the later one, in the order the slow reader gives
    cut = _same(f"{CRI_PART}\nRuntimeError: boom after it\n")  # the record's last part never came
    (error,) = [f for f in cut.findings if f.id == "python-exception"]
    assert error.message.startswith("RuntimeError: NCCL error in"), error.message  # line 1's error leads


def test_what_may_be_glued_is_never_settled() -> None:
    """Must not take the fast way: a line a terminal's width long (spaces too), one a cut left open, a CRI part, a
    line with CR or colour codes: the rejoiner reads them."""
    for line in (WRAPPED_WARN, CUT_OPEN, CRI_PART, CRI_LAST, " " * 80, "x\r", "\x1b[31mValueError: boom\x1b[0m"):
        assert _settled(line) == (), line
    assert _settled("RuntimeError: boom") == ("RuntimeError: boom", None, None, None, None, None)


@pytest.mark.parametrize("seed", range(4))
def test_mixed_shapes_read_as_the_line_by_line_reader_reads_them(seed: int) -> None:
    pick = random.Random(seed)
    text = "\n".join(pick.choice(SHAPES) for _ in range(2000)) + "\n"
    _same(text, 1 << 20, False)
    _same(text, 1 << 20, True)
    # in chunks of a few lines, without CRI parts: a part whose record ends in the next chunk was read apart before
    # these shortcuts too (where a chunk ends changes that reading; not this issue's)
    text = "\n".join(pick.choice([s for s in SHAPES if " stderr " not in s]) for _ in range(2000)) + "\n"
    _same(text, 300, False)


def test_a_healthy_excerpt_still_passes() -> None:
    """Must not fire: an NCCL_DEBUG=INFO init with nothing wrong reads as healthy through the fast ways too."""
    healthy = FIXTURES / "nccl_logs" / "13_single-node-nvlink-p2p-direct-pointer_nvls.log"
    report = _same(healthy.read_text())
    assert report.status == "pass" and not [f for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_folds_shortcut_for_a_line_that_only_matches_rules_changes_nothing(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold reads a line that only matches rules (``LineFacts.hits_only``) without its other steps, unless a
    block is open (torchrun's summary, a crash's, a Flight Recorder stack): the report is the one the full steps give,
    on every real excerpt."""
    shortcut = {path: _read(path.read_text(errors="replace"), 1 << 20, stream) for path in EXCERPTS}
    monkeypatch.setattr(LogFold, "_open_block", lambda self: True)  # every line takes every step
    for path, report in shortcut.items():
        assert report == _read(path.read_text(errors="replace"), 1 << 20, stream), path


def test_a_rule_line_inside_an_open_block_is_still_read_by_the_block() -> None:
    """Must fire: the error that ends a dead thread's traceback matches rules only, and the crash block still reads
    it (the shortcut waits while a block is open): the thread's finding names the error."""
    text = (FIXTURES / "real_failures" / "thread_died_rank1.log").read_text()
    (died,) = [f for f in _same(text).findings if f.id == "thread-died"]
    assert "ValueError: corrupt shard 7 at step 1" in died.message, died.message


CPP_ERRORS = (FIXTURES / "nccl_logs" / "45_terminate-distbackenderror_watchdog-thread-terminated.log").read_text()


def test_a_big_log_of_cpp_exceptions_has_no_stretch_read_for_stack_dumps() -> None:
    """Must not: torch's "Exception raised from ... (most recent call first):" heads C++ frames; a log of rank errors
    past WHOLE_TEXT holds one per rank, and its stretches were the whole log (read as a paste: twice the log's time)."""
    from ncclcheck.sources.logs import WHOLE_TEXT, _stacks, _windows

    text = CPP_ERRORS * (WHOLE_TEXT // len(CPP_ERRORS) + 2)
    assert "(most recent call first):" in text and len(text) > WHOLE_TEXT
    assert _windows(text) == [] and _stacks(text, "job.log") == []


@pytest.mark.parametrize("dump", ["segv_rank1_faulthandler.log", "abort_rank1_faulthandler.log"])
def test_a_dump_among_cpp_exceptions_in_a_big_log_is_still_read(dump: str) -> None:
    """Must fire: a faulthandler dump between C++ exceptions (its own header says "most recent call first") is read,
    at its true line."""
    from ncclcheck.sources.logs import WHOLE_TEXT, _stacks

    filler = CPP_ERRORS * (WHOLE_TEXT // len(CPP_ERRORS) + 2)
    paste = (FIXTURES / "real_failures" / dump).read_text()
    alone = _stacks(paste, dump)
    assert len(alone) == 1
    (found,) = _stacks(filler + paste + filler, dump)
    shift = filler.count("\n")
    assert [p.line - shift for p in found.processes] == [p.line for p in alone[0].processes]
