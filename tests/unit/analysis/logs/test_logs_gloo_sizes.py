"""gloo's size disagreements: a rank whose own call fails ProcessGroupGloo's argument checks, and a rank that
received more bytes than it posted for (gloo's tcp pair). Each is a collective mismatch, never a bare exception;
the same words in anything but gloo's or torch's own line make none.

The real excerpt is tests/fixtures/real_failures/gloo_gather_sizes.log (INDEX.md says how it was made). Where a class
has no real line here, its line is built from the source's format string, as the test says."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport

REAL = FIXTURES / "real_failures"


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "paste.log"))


def mismatch(rep: LogReport) -> Finding:
    found = [f for f in rep.findings if f.id == "collective-mismatch"]
    assert len(found) == 1, [(f.id, f.message) for f in rep.findings]
    return found[0]


def traceback(rank: int, error: str, site: tuple[str, int] = ("/job/train.py", 88)) -> list[str]:
    """A rank's traceback as torch 2.x prints it behind ``[rankN]:``: the user's frame, torch's, the error."""
    torch = "/usr/lib/python3.11/site-packages/torch/distributed"
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "{site[0]}", line {site[1]}, in gather_metrics',
        f"[rank{rank}]:     dist.all_gather(gathered, items)",
        f'[rank{rank}]:   File "{torch}/c10d_logger.py", line 83, in wrapper',
        f"[rank{rank}]:     return func(*args, **kwargs)",
        f'[rank{rank}]:   File "{torch}/distributed_c10d.py", line 4280, in all_gather',
        f"[rank{rank}]:     work = group.allgather([tensor_list], [tensor], opts)",
        f"[rank{rank}]: {error}",
    ]


def test_a_real_all_gather_of_a_short_tensor_names_the_rank_and_its_line() -> None:
    """Rank 1 all-gathered 4 items into outputs sized for 5: rank 1 is the culprit at gather_sizes.py:10; rank 0,
    which waited inside the collective and lost its peer, is not blamed."""
    lines = (REAL / "gloo_gather_sizes.log").read_text(encoding="utf-8").splitlines()
    rep = analyse(frame_all(lines, "gloo_gather_sizes.log"))
    found = mismatch(rep)
    assert rep.root_cause is not None and rep.root_cause.id == "collective-mismatch"
    assert found.culprits == (1,) and found.ranks == (1,)
    assert "rank 1 at gather_sizes.py:10" in found.message and "expected (4), got (5)" in found.message
    assert "allgather" in found.message and "python-exception" not in {f.id for f in rep.findings}
    assert all(0 not in f.culprits for f in rep.findings)


@pytest.mark.parametrize(
    "error",
    [
        # the issue's own line (torch >= 1.x: TORCH_CHECK, a RuntimeError)
        "RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (5), got (4))",
        # torch before TORCH_CHECK: std::invalid_argument, a ValueError (format string of ProcessGroupGloo.cpp)
        "ValueError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (2049), got (1, 2049))",
        # assertTypeMatch's format string: "invalid tensor type at index N (expected T, got U)"
        "RuntimeError: ProcessGroupGloo::allgather: invalid tensor type at index 1 (expected CPUFloatType,"
        " got CPUDoubleType)",
        # allgather's list check: "invalid output tensor list at index N (expected length L, got M)"
        "RuntimeError: ProcessGroupGloo::allgather: invalid output tensor list at index 0 (expected length 4, got 3)",
        # allgather_coalesced's: "invalid size of output tensor at index N (expected length X, got Y)"
        "RuntimeError: ProcessGroupGloo::allgather_coalesced: invalid size of output tensor at index 0"
        " (expected length [1], got [0])",
    ],
)
def test_gloo_s_argument_checks_blame_the_rank_that_raised_them(error: str) -> None:
    found = mismatch(read(*traceback(3, error)))
    assert found.culprits == (3,) and "rank 3 at train.py:88" in found.message
    assert "before any data moved" in found.message


def test_gloo_s_received_size_check_names_the_receiver_and_blames_nobody() -> None:
    """gloo before 2025-07 says only its condition (no "Received data size" sentence): still a mismatch; the rank
    that received too much is named, not blamed (the sender may be the one that is wrong)."""
    error = (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <="
        " op.nbytes. 20 vs 16"
    )
    found = mismatch(read(*traceback(0, error)))
    assert found.ranks == (0,) and found.culprits == ()
    assert "wrong size" in found.message


@pytest.mark.parametrize(
    "line",
    [
        # an ESP-NOW sketch's serial output (a public project's println): the sentence gloo also says, not gloo's
        "[ESPNowManager] ERROR: Received data size doesn't match expected size. Aborting processing.",
        "Received data size doesn't match expected size",
        # OneFlow's own assertion: the same words, no ProcessGroupGloo
        "AssertionError: invalid tensor size at index 1: (5,) vs (4,)",
        # a log line quoting gloo's message (a retry wrapper's INFO): torch raised nothing here
        "2026-11-27 10:01:02,113 INFO trainer: retrying after 'ProcessGroupGloo::allgather: invalid tensor size at"
        " index 0 (expected (4), got (5))'",
        # an exception about something else that quotes it
        "ValueError: could not parse 'ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (4), got"
        " (5))'",
    ],
)
def test_the_same_words_elsewhere_make_no_collective_mismatch(line: str) -> None:
    rep = read("step 10 | loss 2.31", line, "step 11 | loss 2.30")
    assert "collective-mismatch" not in {f.id for f in rep.findings}, rep.findings


def test_a_healthy_gloo_job_is_a_pass() -> None:
    rep = read("[rank0]: step 1 | loss 2.31", "[rank1]: step 1 | loss 2.31", "[rank0]: step 2 | loss 2.30")
    assert rep.status == "pass", rep.findings
