"""An exception Python's unraisable hook printed and ignored ("Exception ignored in: ...", Python/errors.c): the
process went on, so it is a warning, not the job's error. Must-not: an error after the report ended (another rank's,
another file's, or far later) stays an error."""

from __future__ import annotations

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

# torch's DataLoader at interpreter exit, as Python 3.10 prints it (pytorch issues, e.g. #48709's shape)
IGNORED = [
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3c2a1b0d30>",
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__',
    "    self._shutdown_workers()",
    '  File "/opt/conda/lib/python3.10/multiprocessing/process.py", line 160, in is_alive',
    "    assert self._parent_pid == os.getpid(), 'can only test a child process'",
    "AssertionError: can only test a child process",
]
HEALTHY = [
    "gpu01:900:960 [0] NCCL INFO ncclCommInitRank comm 0x55aa rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
    "`Trainer.fit` stopped: `max_epochs=3` reached.",
]
ERROR = "RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0"


def read(*files: tuple[str, list[str]]) -> LogReport:
    return analyse([line for name, lines in files for line in frame_all(lines, name)])


def test_an_ignored_exception_of_a_job_that_ended_well_is_a_warning() -> None:
    for opening in (IGNORED[0], "Exception ignored in atexit callback: <function _exit_function at 0x7f3c2a1b0e50>"):
        report = read(("train.log", [*HEALTHY, opening, *IGNORED[1:]]))
        assert report.status == "pass" and report.root_cause is None, report.findings
        (found,) = [f for f in report.findings if f.id == "exception-ignored"]
        assert found.severity == "warning" and "can only test a child process" in found.message


def test_must_not_an_error_after_the_report_or_elsewhere_is_ignored() -> None:
    far = read(("train.log", [*HEALTHY, *IGNORED[:3], *[f"step {i} loss 2.31" for i in range(500)], ERROR]))
    assert far.root_cause is not None and far.root_cause.id == "python-exception", far.findings
    other_rank = read(("train.log", [f"[rank0]:{x}" for x in IGNORED[:4]] + [f"[rank1]:{ERROR}"]))
    assert other_rank.root_cause is not None and other_rank.root_cause.ranks == (1,), other_rank.findings
    other_file = read(("a.log", [*HEALTHY, *IGNORED[:4]]), ("b.log", [ERROR]))
    assert other_file.root_cause is not None and other_file.root_cause.id == "python-exception"
    after = read(("train.log", [*IGNORED, ERROR]))  # the report ended at its own exception: the next one is an error
    assert after.root_cause is not None and "stack expects" in after.root_cause.message
