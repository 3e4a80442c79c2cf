"""A rank's own exception comes before the errors of ranks whose own lines say their peer went away, where no table
or srun line orders them (analysis/logs/verdict._peers_lost). Must-fire: rank 1's KeyError, then rank 0's IB retries
toward rank 1 and its "remote process exiting prematurely", in one console or one log per rank, whichever order.
Must-not: an IB fault on a rank that says nothing of a lost peer, an exception only on a rank that lost its peer, and
one log with no ranks that holds both the exception and the lost peer keep the error where it was."""

from __future__ import annotations

from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.log_report import LogReport

CASES = FIXTURES / "review_cases" / "peer_lost"
REMOTE = ("ncclRemoteError", "remote process exited", "Last error:", "Process group watchdog thread terminated")


def read(*texts: tuple[str, str]) -> LogReport:
    lines = []
    for name, text in texts:
        lines += list(frame_all(text.splitlines(), name))
    return analyse(lines)


def test_a_bug_in_the_code_is_not_the_network_of_the_rank_that_lost_its_peer() -> None:
    cause = read(("console.log", (CASES / "one_console.log").read_text())).root_cause
    assert cause is not None and cause.id == "python-exception" and cause.ranks == (1,), cause
    assert "attention_mask" in cause.message


def test_one_log_per_rank_in_either_order() -> None:
    rank0 = ("rank0.log", (CASES / "per_rank" / "rank0.log").read_text())
    rank1 = ("rank1.log", (CASES / "per_rank" / "rank1.log").read_text())
    for order in ((rank0, rank1), (rank1, rank0)):
        cause = read(*order).root_cause
        assert cause is not None and cause.id == "python-exception" and "attention_mask" in cause.message, cause


def test_must_not_an_ib_fault_on_a_rank_that_lost_no_peer_loses_to_the_exception() -> None:
    """Rank 0 says nothing of a lost peer: its IB error may be the fault itself."""
    text = "\n".join(
        line for line in (CASES / "one_console.log").read_text().splitlines() if not any(w in line for w in REMOTE)
    )
    report = read(("console.log", text))
    assert not any(f.id == "peer-crashed" for f in report.findings), report.findings
    assert report.root_cause is not None and report.root_cause.id == "ib-retry-exceeded", report.root_cause


def test_must_not_an_exception_of_the_rank_that_lost_its_peer_is_put_first() -> None:
    text = (CASES / "one_console.log").read_text().replace("[rank1]:", "[rank0]:")
    cause = read(("console.log", text)).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause


def test_must_not_one_log_without_ranks_holding_both_reorders_them() -> None:
    text = "\n".join(line.split(":", 1)[1] for line in (CASES / "one_console.log").read_text().splitlines())
    cause = read(("console.log", text)).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause
