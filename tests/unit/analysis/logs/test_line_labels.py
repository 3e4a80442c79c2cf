"""The integrity of tests/fixtures/line_labels.tsv, the hand labels of every line of the real log excerpts: every
listed file exists, every excerpt of the labelled folders is listed, each file's rows cover its lines 1..N exactly
once and in order, the labels are the four known ones, and every benign row says why it is harmless. This test reads
the data only; it does not hold any reader to the labels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES

LABELS_FILE = FIXTURES / "line_labels.tsv"
FOLDERS = ("nccl_logs", "nccl_logs_more", "real_failures", "ras", "torchrun")  # and their subfolders
LABELS = frozenset({"failure", "warning", "benign", "info"})


@dataclass(frozen=True)
class Row:
    number: int  # line of line_labels.tsv, for messages
    file: str
    first: int
    last: int
    label: str
    note: str


def parse_lines(spec: str, where: str) -> tuple[int, int]:
    first_text, dash, last_text = spec.partition("-")
    if not first_text.isdigit() or (dash and not last_text.isdigit()):
        pytest.fail(f"{where}: lines {spec!r} is neither N nor A-B")
    first = int(first_text)
    last = int(last_text) if dash else first
    if first < 1 or last < first:
        pytest.fail(f"{where}: lines {spec!r} is not a 1-based range A-B with A <= B")
    return first, last


def read_rows() -> list[Row]:
    rows: list[Row] = []
    for number, line in enumerate(LABELS_FILE.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#") or not line.strip():
            continue
        where = f"line_labels.tsv:{number}"
        fields = line.split("\t")
        if len(fields) != 4:
            pytest.fail(f"{where}: {len(fields)} tab-separated fields, want 4 (file, lines, label, note)")
        file, spec, label, note = fields
        first, last = parse_lines(spec, where)
        rows.append(Row(number, file, first, last, label, note))
    return rows


def line_count(path: Path) -> int:
    """N as str.splitlines() counts it, on the file's exact text (no newline translation)."""
    return len(path.read_bytes().decode("utf-8").splitlines())


def by_file(rows: list[Row]) -> dict[str, list[Row]]:
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row.file, []).append(row)
    return grouped


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return read_rows()


def test_the_header_explains_the_labels() -> None:
    header = [line for line in LABELS_FILE.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    text = "\n".join(header)
    assert header, "the file starts with a comment block explaining the labels"
    for label in LABELS:
        assert label in text


def test_every_listed_file_exists(rows: list[Row]) -> None:
    missing = sorted({row.file for row in rows if not (FIXTURES / row.file).is_file()})
    assert not missing, f"listed but not in tests/fixtures: {missing}"


def test_every_excerpt_is_listed(rows: list[Row]) -> None:
    listed = {row.file for row in rows}
    present = {
        path.relative_to(FIXTURES).as_posix() for folder in FOLDERS for path in (FIXTURES / folder).rglob("*.log")
    }
    assert present, "the labelled folders hold excerpts"
    assert sorted(present - listed) == [], "every *.log of the labelled folders has rows"


def test_rows_of_a_file_are_consecutive(rows: list[Row]) -> None:
    """All of a file's rows sit together, so the file reads top to bottom in one place."""
    seen: list[str] = []
    for row in rows:
        if not seen or seen[-1] != row.file:
            assert row.file not in seen, f"line_labels.tsv:{row.number}: rows of {row.file} are split"
            seen.append(row.file)


def test_each_file_is_covered_exactly_once_in_order(rows: list[Row]) -> None:
    for file, file_rows in by_file(rows).items():
        path = FIXTURES / file
        if not path.is_file():
            continue  # reported by test_every_listed_file_exists
        expected = 1
        for row in file_rows:
            assert row.first == expected, (
                f"line_labels.tsv:{row.number}: {file} lines {row.first}-{row.last}, "
                f"want the next range to start at {expected} (a gap or an overlap)"
            )
            expected = row.last + 1
        count = line_count(path)
        assert expected - 1 == count, f"{file}: rows end at line {expected - 1}, the file has {count} lines"


def test_labels_are_known(rows: list[Row]) -> None:
    bad = [f"line_labels.tsv:{row.number}: {row.label!r}" for row in rows if row.label not in LABELS]
    assert not bad, f"labels must be one of {sorted(LABELS)}: {bad}"


def test_every_benign_row_says_why(rows: list[Row]) -> None:
    silent = [f"line_labels.tsv:{row.number}" for row in rows if row.label == "benign" and not row.note.strip()]
    assert not silent, f"a benign row needs a note saying why the line is harmless: {silent}"
