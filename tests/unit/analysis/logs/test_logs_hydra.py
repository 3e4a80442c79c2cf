"""Tracebacks whose first frame is a user function, of exceptions that ended the rank: Hydra prints an uncaught
exception's traceback from the user's ``@hydra.main`` function on (``run_and_report``), and ``except:
traceback.print_exc(); sys.exit(1)`` prints it from the function that caught it. Must-not: neither is read as an
exception the code went on from; the exception stays the cause (before the timeout it led to, too)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all

CASES = FIXTURES / "review_cases" / "hydra"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("srun_nemo_hydra_keyerror_then_timeout.out", "tokens"),
        ("hydra_rank1_pod.log", "input_ids"),
        ("print_exc_then_exit.log", "inputs"),
    ],
)
def test_must_not_an_uncaught_exception_printed_from_a_user_frame_loses_its_place(name: str, key: str) -> None:
    report = analyse(frame_all((CASES / name).read_text().splitlines(), name))
    cause = report.root_cause
    assert report.status == "fail" and cause is not None and cause.id == "python-exception", report.findings
    assert f"KeyError: '{key}'" in cause.message
