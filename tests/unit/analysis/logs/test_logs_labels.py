"""The reader held to the hand labels (tests/fixtures/line_labels.tsv: every line of every real excerpt, labelled by
reading it, not by running ncclcheck): every line labelled a failure is read as an error by its emitter's grammar
(recall 100 %), and no line labelled benign or info is (a benign one the catalogue explains is information)."""

from __future__ import annotations

import bisect
import csv
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.events import ERROR, Event, stream
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.logs import LogLine


@dataclass(frozen=True)
class Label:
    file: str
    first: int
    last: int
    label: str
    note: str


def labels() -> list[Label]:
    rows = (FIXTURES / "line_labels.tsv").read_text().splitlines()
    out = []
    for row in csv.reader((r for r in rows if r and not r.startswith("#")), delimiter="\t", quoting=csv.QUOTE_NONE):
        file, lines, label, note = [*row, ""][:4]
        first, _, last = lines.partition("-")
        out.append(Label(file, int(first), int(last or first), label, note))
    return out


LABELS = labels()
FILES = sorted({x.file for x in LABELS})


def framed(file: str) -> list[LogLine]:
    return list(frame_all((FIXTURES / file).read_text().splitlines(), file))


def readings(file: str) -> Iterator[tuple[int, str, Event | None]]:
    """Each physical line's number, label and the event that holds it (a hard wrap's rest is in its head's;
    None for a line framing drops, a blank one)."""
    lines = list(stream(framed(file)))
    starts = [x.line for x in lines]
    for row in (x for x in LABELS if x.file == file):
        for number in range(row.first, row.last + 1):
            at = bisect.bisect_right(starts, number) - 1
            yield number, row.label, lines[at] if at >= 0 else None


@pytest.mark.parametrize("file", FILES)
def test_every_failure_line_is_read_as_an_error(file: str) -> None:
    missed = [
        f"{n}: {line.text[:160] if line else '(dropped)'}"
        for n, label, line in readings(file)
        if label == "failure" and (line is None or line.severity != ERROR)
    ]
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("file", FILES)
def test_no_benign_or_info_line_is_read_as_an_error(file: str) -> None:
    """A framed line that holds a failure too (a glued or rejoined line) is the failure's."""
    failing = {line.line for n, label, line in readings(file) if label == "failure" and line is not None}
    wrong = [
        f"{n} ({label}): {line.text[:160]}"
        for n, label, line in readings(file)
        if label in ("benign", "info") and line is not None and line.line not in failing and line.severity == ERROR
    ]
    assert not wrong, "\n".join(wrong)
