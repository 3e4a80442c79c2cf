"""An exception the code caught and went on from (analysis/logs/diagnose.LogFold._traceback): its traceback starts in
the user's function that caught it, where an uncaught one's starts at the program's top (``<module>``, runpy, a
thread's bootstrap). Must-fire: the review's wandb error logged in train_step is a warning. Must-not: an uncaught
exception, the first of a chain ("During handling of the above exception"), a traceback a library printed, a thread's,
and a caught one on a rank torchrun's table says failed stay errors."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASE = FIXTURES / "review_cases" / "restarts" / "caught_no_launcher_lines.log"


def read(*lines: str) -> LogReport:
    return analyse(frame_all(list(lines), "job.log"))


def tb(first: tuple[str, str], error: str, prefix: str = "[rank0]:") -> list[str]:
    file, fn = first
    return [
        f"{prefix}Traceback (most recent call last):",
        f'{prefix}  File "{file}", line 133, in {fn}',
        f"{prefix}    step(batch)",
        f'{prefix}  File "/job/model.py", line 41, in step',
        f"{prefix}    x = batch['pixel_values']",
        f"{prefix}{error}",
    ]


def test_an_exception_the_code_caught_and_went_on_from_is_a_warning() -> None:
    report = analyse(frame_all(CASE.read_text().splitlines(), "job.log"))
    assert report.status == "pass", report.findings
    (caught,) = [f for f in report.findings if f.id == "exception-caught"]
    assert caught.severity == "warning" and caught.ranks == (0,) and "train_step" in caught.message
    assert "Broken pipe" in caught.message


def test_must_not_an_exception_that_went_up_to_the_program_s_top_is_caught() -> None:
    report = read(*tb(("/job/train.py", "<module>"), "KeyError: 'pixel_values'"), "[rank0]:step 2 loss 1.0")
    assert report.root_cause is not None and report.root_cause.id == "python-exception", report.findings


def test_must_not_the_first_of_a_chain_is_caught() -> None:
    lines = [
        *tb(("/job/train.py", "load"), "KeyError: 'pixel_values'"),
        "[rank0]:",
        "[rank0]:During handling of the above exception, another exception occurred:",
        "[rank0]:",
        *tb(("/job/train.py", "<module>"), "RuntimeError: could not load the batch"),
    ]
    report = read(*lines)
    cause = report.root_cause
    assert cause is not None and cause.id == "python-exception" and "pixel_values" in cause.message, report.findings
    assert all(f.id != "exception-caught" for f in report.findings)


def test_must_not_a_traceback_a_library_or_a_thread_printed_is_caught() -> None:
    library = ("/usr/lib/python3/dist-packages/accelerate/launchers.py", "notebook_launcher")
    thread = ("/usr/lib/python3.10/threading.py", "_bootstrap_inner")
    for first in (library, thread):
        report = read(*tb(first, "ValueError: corrupt shard 7"))
        assert report.status == "fail" and all(f.id != "exception-caught" for f in report.findings), first


def test_must_not_a_caught_exception_of_a_rank_torchrun_says_failed_is_a_warning() -> None:
    """Caught, logged, then an exit with an error code: torchrun's table names the rank; the exception was why."""
    table = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-06-12_10:05:00",
        "  host      : node0",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 3190)",
        "  error_file: <N/A>",
        "============================================================",
    ]
    report = read(*tb(("/job/train.py", "train_step"), "KeyError: 'pixel_values'"), *table)
    assert any(f.id == "python-exception" and f.severity == "error" for f in report.findings), report.findings
    assert all(f.id != "exception-caught" for f in report.findings)
