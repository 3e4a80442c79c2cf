"""A rank that never started: the interpreter's and the launcher's own error lines name why (a missing script, a
module not found, a command line refused), in ``logs`` and so in ``run``'s verdict; never "its traceback is earlier"."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.run.verdict import verdict
from ncclcheck.collectors.logfiles import sources
from ncclcheck.model.log_report import LogReport
from ncclcheck.sources.logs import diagnose

TORCHRUN = FIXTURES / "launch"  # real captures: see its INDEX.md


def lines(*text: str) -> LogReport:
    return analyse(frame_all(text, "launcher.log"))


@pytest.mark.parametrize(
    ("name", "fid", "words"),
    [
        ("script_not_found", "script-not-found", "python could not find the script /job/s1.py"),
        ("module_not_found", "module-not-found", "python -m found no module nosuchpkg"),
        ("module_spec_not_found", "module-not-found", "could not find the module nosuchpkg.train (ModuleNotFoundError"),
        ("torchrun_usage_error", "launcher-usage", "the following arguments are required: training_script"),
    ],
)
def test_a_rank_that_never_started_is_named_by_the_interpreter_s_own_line(name: str, fid: str, words: str) -> None:
    report = diagnose(sources([str(TORCHRUN / f"{name}.log")]))
    assert report.root_cause is not None and report.root_cause.id == fid, report.root_cause
    assert words in report.root_cause.message
    result, _ = verdict(1, False, (), report, None)
    assert result.root_cause == fid and words in result.message
    assert "traceback is earlier" not in result.message + report.root_cause.fix


@pytest.mark.parametrize(
    ("line", "fid", "words"),
    [
        # CPython's format (Modules/main.c: "%ls: can't open file %R: [Errno %d] %s"); no real capture: root reads all
        (
            "/usr/bin/python3: can't open file '/job/train.py': [Errno 13] Permission denied",
            "script-not-readable",
            "may not read the script /job/train.py",
        ),
        (
            "[rank0]: train.py: error: unrecognized arguments: --lr=3e-4",
            "script-usage",
            "train.py refused its arguments",
        ),
        ("torchrun: error: argument --nnodes: expected one argument", "launcher-usage", "argument --nnodes"),
    ],
)
def test_the_formats_without_a_capture_here(line: str, fid: str, words: str) -> None:
    report = lines(line)
    assert report.root_cause is not None and report.root_cause.id == fid and words in report.root_cause.message


@pytest.mark.parametrize(
    "line",
    [
        # torch's import warning names a missing module the job does not need
        "/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: UserWarning: Failed to"
        " initialize NumPy: No module named 'numpy' (Triggered internally at tensor_numpy.cpp:84.)",
        "[rank0]: ModuleNotFoundError: No module named 'apex'",  # an import inside the job: its traceback's error
        "INFO: validation: error: 0.12",  # a chatty line with ": error: "
        "python: can't open file '/job/t.py': [Errno 2] No such file or directory (retrying with t2.py)",
    ],
)
def test_lines_that_are_not_a_rank_failing_to_start(line: str) -> None:
    ids = {f.id for f in lines(line).findings}
    assert not ids & {"script-not-found", "module-not-found", "launcher-usage", "script-usage"}, ids
