"""Errors in different files ordered by the stamps their lines carry (analysis/logs/stamps.py, verdict._by_the_clock),
where no torchrun table orders them: one log per rank, each line behind an ISO 8601 stamp. Must-fire: the same logs
give the same cause whichever file is given first. Must-not: errors closer than the clocks' margin, stamps with and
without a zone, errors in one file, and lines with no stamp keep the order they had."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.stamps import Instant, instant
from ncclcheck.collectors.logfiles import Reading, lines_at, sources
from ncclcheck.model.log_report import LogReport
from ncclcheck.sources.logs import diagnose

CASE = FIXTURES / "review_cases" / "first_failure" / "iso_stamped"
OOM_AT = datetime.datetime(2026, 11, 20, 9, 9, 28, 17_000, tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("raw", "seconds", "zoned"),
    [
        ("2026-11-20T09:09:28.017Z Traceback (most recent call last):", OOM_AT, True),
        ("2026-11-20 09:09:28,017 ERROR train: step failed", OOM_AT, False),  # Python logging's asctime
        ("[2026-11-20 09:09:28] loading", OOM_AT - 0.017, False),
        ("2026-11-20T09:09:28.017000123Z stderr F torch.OutOfMemoryError: ...", OOM_AT, True),  # CRI, nanoseconds
        ("2026-11-20T11:09:28.017+02:00 x", OOM_AT, True),
        ("2026-11-20T04:09:28.017-0500 x", OOM_AT, True),
        ("[rank1]:2026-11-20T09:09:28.017Z x", OOM_AT, True),
        ("3: 2026-11-20 09:09:28.017 x", OOM_AT, False),  # srun --label
    ],
)
def test_a_line_s_iso_stamp_is_read_as_its_instant(raw: str, seconds: float, zoned: bool) -> None:
    at = instant(raw)
    assert at is not None and at.zoned == zoned and at.seconds == pytest.approx(seconds, abs=1e-3), at


@pytest.mark.parametrize(
    "raw",
    [
        "node0:4100:4180 [0] NCCL WARN NET/IB : Got completion from peer",
        "2026-13-45 09:09:28 not a date",
        "2026-11-20 25:09:28 not a time",
        "20261120 090928 compact",
        "step 2026-11-20T09:09:28Z in the middle",
        "2026-11-20T09:09:28:17 a fourth field",
    ],
)
def test_must_not_a_line_without_a_stamp_at_its_start_has_an_instant(raw: str) -> None:
    assert instant(raw) is None


def judge(*paths: Path) -> LogReport:
    reading = Reading()
    return diagnose(sources([str(p) for p in paths], reading), reading, cores=1)


def test_the_stamps_order_per_rank_files_whichever_is_given_first() -> None:
    for order in ((CASE / "rank0.log", CASE / "rank1.log"), (CASE / "rank1.log", CASE / "rank0.log")):
        cause = judge(*order).root_cause
        assert cause is not None and cause.id == "model-oom", (order, cause)


def shifted(tmp_path: Path, seconds: str, zone: str = "Z") -> tuple[Path, Path]:
    """The two files, rank 1's error lines stamped at 09:10:``seconds`` (rank 0's IB error is at 09:10:05.412Z)."""
    rank0 = tmp_path / "rank0.log"
    rank0.write_text((CASE / "rank0.log").read_text())
    text = (CASE / "rank1.log").read_text().replace("2026-11-20T09:09:28.0", f"2026-11-20T09:10:{seconds}.0")
    rank1 = tmp_path / "rank1.log"
    rank1.write_text(
        text.replace(f"{seconds}.017Z", f"{seconds}.017{zone}").replace(f"{seconds}.018Z", f"{seconds}.018{zone}")
    )
    return rank0, rank1


def test_must_not_errors_closer_than_the_clocks_margin_are_ordered_by_them(tmp_path: Path) -> None:
    rank0, rank1 = shifted(tmp_path, "05")  # 0.4 s before rank 0's: within the margin
    cause = judge(rank0, rank1).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause  # the order given, as before


def test_must_not_a_stamp_without_a_zone_is_compared_with_one_that_has_it(tmp_path: Path) -> None:
    rank0, rank1 = shifted(tmp_path, "00", zone="")  # 5 s before rank 0's, if both were UTC: they may not be
    cause = judge(rank0, rank1).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause


def test_must_not_errors_in_one_file_are_reordered_by_their_stamps(tmp_path: Path) -> None:
    """One console holding both (its lines interleaved as written): the file's order is the order they were printed."""
    both = tmp_path / "console.log"
    both.write_text((CASE / "rank0.log").read_text() + (CASE / "rank1.log").read_text())
    cause = judge(both).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause


def test_must_not_files_without_stamps_change_order(tmp_path: Path) -> None:
    plain = []
    for name in ("rank0.log", "rank1.log"):
        path = tmp_path / name
        path.write_text("\n".join(line.split(" ", 1)[1] for line in (CASE / name).read_text().splitlines()) + "\n")
        plain.append(path)
    cause = judge(*plain).root_cause
    assert cause is not None and cause.id == "ib-retry-exceeded", cause


def test_lines_at_reads_the_lines_as_the_reader_numbers_them(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("one\r\ntwo\n" + "x" * 70_000 + "\nfour\n")  # a line longer than one read of MAX_LINE
    (source,) = sources([str(path)], Reading())
    got = lines_at(source, {1, 2, 4})
    assert got == {1: "one", 2: "two", 4: "four"}
    assert Instant(1.0, True) < Instant(2.0, True)
