"""Large logs are read in parts on several cores: the report must be the one a single pass gives, and the
workers must end with ncclcheck however it ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from big_logs import job_text
from conftest import FIXTURES

from ncclcheck.analysis.logs import recording
from ncclcheck.analysis.logs.diagnose import LogFold, quiet
from ncclcheck.analysis.logs.frame import RANK_BEHIND, cut_after, fold_chunks, frame_all, ranks_in
from ncclcheck.analysis.logs.nccl import RankFold
from ncclcheck.analysis.logs.prefixes import WRAP_WIDTHS, strip_prefixes
from ncclcheck.collectors.logfiles import LogSource, sources, spans
from ncclcheck.model.logs import LogLine, RankLog
from ncclcheck.sources import log_parts


def test_a_later_half_merged_is_the_whole_fold() -> None:
    """RankFold.merge: a source's lines folded in two pieces, cut anywhere, give what one fold gives."""
    for path in sorted((FIXTURES / "nccl_logs").glob("*.log"))[:20]:
        lines = [x for x in frame_all(path.read_text(errors="replace").splitlines(), path.name) if x.nccl]
        _merged_anywhere(lines, max(1, len(lines) // 9))


def _merged_anywhere(lines: list[LogLine], step: int = 1) -> tuple[RankLog, ...]:
    """The fold of ``lines``, checked to be what folding them in two halves and merging gives, cut anywhere."""
    whole = RankFold()
    for line in lines:
        whole.feed(line)
    for cut in range(0, len(lines) + 1, step):
        first, later = RankFold(), RankFold()
        for line in lines[:cut]:
            first.feed(line)
        for line in lines[cut:]:
            later.feed(line)
        first.merge(later, 0)
        assert first.result() == whole.result(), (lines[0].file, cut)
    return whole.result()


def test_a_subgroups_rank_merged_from_a_later_part_keeps_the_largest_communicators() -> None:
    """A process's rank is its largest communicator's (NCCL's Init and topology lines): cut anywhere, the merged
    halves keep it, whichever communicator came first; and the first line's prefix rank stays."""

    def init(rank: int, nranks: int, comm: str) -> list[str]:
        return [
            f"node1:100:100 [5] NCCL INFO ncclCommInitRank comm 0x{comm} rank {rank} nranks {nranks} cudaDev 5"
            f" nvmlDev 5 busId 90000 commId 0x{comm}7 - Init START",
            f"node1:100:100 [5] NCCL INFO comm 0x{comm} rank {rank} nRanks {nranks} nNodes 1 localRanks 8",
        ]

    for text in (init(5, 8, "a") + init(1, 2, "b"), init(1, 2, "b") + init(5, 8, "a") + init(0, 2, "c")):
        for prefix in ("", "[rank5]:"):
            lines = [x for x in frame_all([prefix + t for t in text], "x.log") if x.nccl]
            assert [(r.rank, r.nranks) for r in _merged_anywhere(lines)] == [(5, 8)], (text, prefix)


def test_a_file_is_never_cut_after_a_line_a_terminal_may_have_wrapped(tmp_path: Path) -> None:
    rows = [("x" * (80 if i % 5 else 57)) for i in range(4000)]
    log = tmp_path / "wrapped.log"
    log.write_text("\n".join(rows) + "\n")
    data = log.read_bytes()
    found = spans(str(log), 4096, cut_after)
    assert len(found) > 10 and found[0][0] == 0 and found[-1][1] == len(data)
    for (_, end), (start, _) in zip(found, found[1:]):
        assert end == start and data[end - 1 : end] == b"\n"
        last = data[: end - 1].rsplit(b"\n", 1)[-1]
        assert len(last) not in WRAP_WIDTHS, end


def test_one_core_or_little_to_read_starts_no_worker(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(job_text())
    found = sources([str(log)])
    assert log_parts.plan(found, cores=1) == {}
    assert log_parts.plan(found, cores=8) == {}  # well under WORTH_IT: forking costs more than it saves
    assert log_parts.plan((LogSource("<stdin>", "-"),), cores=8) == {}


def test_a_big_utf16_file_is_read_whole_and_a_big_utf8_one_in_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A UTF-16 file's bytes cannot be cut at its newlines as UTF-8's are (each is two bytes): one part, whole."""
    monkeypatch.setattr(log_parts, "PART", 4096)
    monkeypatch.setattr(log_parts, "MIN_PART", 1024)
    monkeypatch.setattr(log_parts, "WORTH_IT", 1024)
    text = "".join(f"step {i} | loss 2.31\n" for i in range(2000))
    (tmp_path / "a.log").write_bytes(text.encode("utf-8"))
    (tmp_path / "b.log").write_bytes(text.encode("utf-16"))
    found = sources([str(tmp_path / "a.log"), str(tmp_path / "b.log")])
    parts = log_parts.plan(found, cores=2)
    assert len(parts[0]) > 2 and all(p.span is not None for p in parts[0])
    assert [p.span for p in parts[1]] == [None]


def test_without_an_affinity_call_every_core_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no sched_getaffinity: reading logs there must not fail for want of it."""
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert log_parts.usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert log_parts.usable_cores() == 1


def test_a_big_file_that_cannot_be_opened_is_a_note_not_a_traceback(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*_: object) -> list[tuple[int, int]]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(log_parts, "spans", denied)
    found = sources([str(big_log)])
    assert log_parts.plan(found, cores=2) == {}  # read here instead, where an unreadable file becomes a note


SUMMARY = """\
[rank1]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.
E1121 10:00:05.000 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 3
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-07-26_10:59:45
  host      : node3
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 214033)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 214033
============================================================
"""


@pytest.mark.parametrize("size", [64, 97, 130, 211, 300, 512])
def test_where_a_chunk_ends_changes_nothing(size: int) -> None:
    """Chunks of a few dozen characters end inside the summary and among training lines: a rank whose lines
    are only counted is still present (a suspect of the timeout), and the summary is read whole."""
    steps = "".join(f"[rank{r}]:step {i} | loss 2.31\n" for i in range(40) for r in (0, 2))
    text = steps + SUMMARY + steps
    one = LogFold()
    fold_chunks([text], "job.log", quiet, one)
    chunks, chunk = [], ""
    for line in text.splitlines(keepends=True):  # chunks of whole lines, as the readers hand them over
        chunk += line
        if len(chunk) >= size:
            chunks.append(chunk)
            chunk = ""
    cut = LogFold()
    fold_chunks([*chunks, chunk], "job.log", quiet, cut)
    whole, pieces = one.result(), cut.result()
    assert [f.rank for f in whole.failures] == [3] and whole.failures == pieces.failures
    (timeout,) = [f for f in pieces.findings if f.id == "collective-timeout"]
    assert 2 in timeout.culprits, timeout  # rank 2 logs training lines and did not report the timeout
    assert whole.findings == pieces.findings and whole.root_cause == pieces.root_cause


def test_a_rank_whose_lines_are_only_counted_is_still_present() -> None:
    """Rank 2 prints one training line deep in a stretch that is only counted (no trigger in its chunk): it
    is present in the logs, did not report the timeout, so it is the suspect, as when its line is read."""
    timeouts = (
        "".join(SUMMARY.splitlines(keepends=True)[:1]).replace("rank1]", "rank0]")
        + SUMMARY.splitlines(keepends=True)[0]
    )
    training = [f"[rank{0 if i != 2500 else 2}]:step {i} | loss 2.31\n" for i in range(5000)]
    chunks = [timeouts, "".join(training[:2000]), "".join(training[2000:]), timeouts]
    cut = LogFold()
    fold_chunks(chunks, "job.log", quiet, cut)
    (timeout,) = [f for f in cut.result().findings if f.id == "collective-timeout"]
    assert timeout.culprits == (2,), timeout


def test_a_recorded_part_replayed_ends_a_flight_recorder_stack_as_one_pass_does() -> None:
    """A plain line ends the Flight Recorder stack its rank (or a line naming no rank) opened: replayed from a
    part, where plain lines come back only as a count and their ranks, the frame after it is not the failed
    collective's site either."""
    from ncclcheck.analysis.logs.recording import Recorder, replay

    for prefix in ("", "[rank3]:"):
        text = (
            f"{prefix}[E ProcessGroupNCCL.cpp:1234] Stack trace of the failed collective: \n"
            f"{prefix}step 5 done\n"
            f"{prefix}#0 all_reduce from /work/train.py:41\n"
            "[rank5]:Stack trace of the failed collective: \n"
            "[rank5]:#0 broadcast from /work/train.py:77\n"
        )
        one_pass, recorder = LogFold(), Recorder()
        lines = fold_chunks([text], "x.log", quiet, one_pass)
        fold_chunks([text], "x.log", quiet, recorder)
        replayed = LogFold()
        replay(replayed, recorder.result(lines), 0)
        assert replayed.result() == one_pass.result(), prefix
        (site,) = [f for f in one_pass.result().findings if f.id == "failed-collective-site"]
        assert site.ranks == (5,) and "train.py:77" in site.message  # rank 5's stack, never the ended one


@pytest.mark.parametrize("heads", [1, 3])
def test_a_recorder_that_forgets_its_headers_records_what_one_pass_reads(
    monkeypatch: pytest.MonkeyPatch, heads: int
) -> None:
    """A part's Recorder remembers each NCCL header's source; forgetting them (bounded memory) must not make a
    second source of one process, or change anything else."""
    text = job_text()
    whole = LogFold()
    fold_chunks([text], "job.log", quiet, whole)
    monkeypatch.setattr(recording, "MAX_HEADS", heads)
    recorder = recording.Recorder()
    lines = fold_chunks([text], "job.log", quiet, recorder)
    replayed = LogFold()
    recording.replay(replayed, recorder.result(lines), 0)
    assert replayed.result() == whole.result()
    assert len(whole.result().ranks) > 10


LEADS = [
    "node1: ",  # pdsh, clush
    "3: ",  # srun --label
    "node1: 3: ",
    "trainer-1  | ",  # docker compose
    "[pod/trainer-0/pytorch] ",  # kubectl logs --prefix
    "2024-07-26T10:59:45.123456Z ",  # kubectl --timestamps
    "Nov 21 10:00:01 node3 train[42]: ",  # syslog, journald
    "trainer-0 pytorch ",  # stern
    "[rank4]:",  # nested: the outer prefix is the rank
    "Epoch: ",  # not a prefix (a word without a digit): no rank
    "Step 12: ",  # not a prefix (capitalised): no rank
    "\tat ",
]


@pytest.mark.parametrize("lead", LEADS)
def test_a_counted_line_names_the_rank_a_read_line_would(lead: str) -> None:
    """A line only counted names the rank that framing it would give (``strip_prefixes``): behind pdsh's or
    srun's prefix as at the start, never a rank behind a word that is no prefix."""
    lines = [f"{lead}[rank{r}]:step {r} | loss 2.31" for r in (2, 5)] + [f"{lead}[0,7]<stdout>:step 3"]
    read = {strip_prefixes(line)[1] for line in lines} - {None}
    for text in ("\n".join(lines) + "\n", "plain\n" + "\n".join(lines)):
        assert ranks_in(text, 0) == read, (lead, text)
    expected = {"[rank4]:": {4}, "Epoch: ": set(), "Step 12: ": set(), "\tat ": set(), "trainer-0 pytorch ": {2, 5}}
    assert read == expected.get(lead, {2, 5, 7}), lead  # stern's prefix is taken off only before torchrun's
    assert ranks_in(f"{lead}x\n" * 3, 0) == ({4} if "[rank" in lead else set())  # nor one that is not there


def test_a_prefix_before_a_rank_prefix_is_looked_for_within_its_line() -> None:
    """A timestamp alone on its line is not a prefix of the next line's rank prefix (the regex runs over a
    whole piece: a prefix's whitespace must not match a newline)."""
    assert RANK_BEHIND.match("\n2024-07-26T10:59:45Z\n[rank3]:x") is None
    assert RANK_BEHIND.match("\n2024-07-26T10:59:45Z [rank3]:x") is not None


def test_a_rank_behind_pdshs_prefix_in_a_counted_stretch_is_still_present() -> None:
    """``node1: [rank2]:step``: rank 2 logs only training lines, all of them only counted; it did not report
    the timeout ranks 0 and 1 did, so it is the suspect, as when its lines are read."""
    first = SUMMARY.splitlines(keepends=True)[0]
    timeouts = first.replace("rank1]", "rank0]") + first
    training = "".join(f"node1: [rank{0 if i != 2500 else 2}]:step {i} | loss 2.31\n" for i in range(5000))
    for chunks in ([timeouts, training, timeouts], [timeouts + training + timeouts]):
        fold = LogFold()
        fold_chunks(chunks, "job.log", quiet, fold)
        (timeout,) = [f for f in fold.result().findings if f.id == "collective-timeout"]
        assert timeout.culprits == (2,), timeout
