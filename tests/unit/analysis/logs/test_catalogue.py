"""The message catalogue (ncclcheck/data/messages.tsv) against the rules that read those messages.

One row per message format a rule matches: who prints it, the source file that defines it, the releases
that print it, the format as the source writes it and one log line in the shape its emitter prints. The
``example`` column holds a single log line; two escapes stand for what a TSV field cannot hold: ``\\t``
is a tab (torch's desync report indents with one) and ``\\n`` separates log lines, for a finding that
needs the line before it (a Flight Recorder frame follows its "Stack trace of the failed collective:").
The torch rows' ``versions`` were found by tools/catalogue_torch_versions.py: the literals of each message
searched for in the release wheels of torch 2.2 to 2.15.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from importlib import resources

import pytest

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.line_facts import EXCEPTION, FR_SITE
from ncclcheck.analysis.logs.rules import RULES, TRAIL_RULES, Rule

COLUMNS = ("id", "role", "emitter", "source", "versions", "format", "example", "fix_summary")
ROLES = frozenset({"primary", "echo", "info", "wrapper"})
ALL_RULES: tuple[Rule, ...] = (*RULES, *TRAIL_RULES, EXCEPTION, FR_SITE)


def _read() -> tuple[tuple[str, ...], list[dict[str, str]]]:
    text = resources.files("ncclcheck").joinpath("data/messages.tsv").read_text(encoding="utf-8")
    reader = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    return tuple(reader.fieldnames or ()), list(reader)


HEADER, ROWS = _read()


def _rules_by_id() -> dict[str, list[Rule]]:
    found: dict[str, list[Rule]] = {}
    for rule in ALL_RULES:
        found.setdefault(rule.id, []).append(rule)
    return found


RULES_BY_ID = _rules_by_id()


def _params() -> Iterator[object]:
    seen: dict[str, int] = {}
    for row in ROWS:
        seen[row["id"]] = seen.get(row["id"], 0) + 1
        words = re.sub(r"[^A-Za-z0-9]+", "-", row["format"]).strip("-")[:40]
        yield pytest.param(row, id=f"{row['id']}-{seen[row['id']]}-{words}")


def _lines(example: str) -> list[str]:
    return example.replace("\\t", "\t").split("\\n")


def test_the_table_has_its_columns_and_no_empty_field() -> None:
    assert HEADER == COLUMNS
    assert ROWS
    for number, row in enumerate(ROWS, 2):
        assert None not in row, f"line {number}: more fields than columns"
        assert all(row[c] and row[c].strip() for c in COLUMNS), f"line {number}: an empty field"
        assert row["role"] in ROLES, f"line {number}: role {row['role']!r}"


def test_every_rule_has_a_row_and_every_row_a_rule() -> None:
    ids = {row["id"] for row in ROWS}
    assert set(RULES_BY_ID) - ids == set(), "rules with no message in the catalogue"
    assert ids - set(RULES_BY_ID) == set(), "catalogue ids no rule has"
    assert {"python-exception", "failed-collective-site"} <= ids


def test_rules_sharing_an_id_agree_on_severity_and_echo() -> None:
    for fid, rules in RULES_BY_ID.items():
        assert len({(r.severity, r.secondary) for r in rules}) == 1, fid


@pytest.mark.parametrize("row", _params())
def test_the_example_gives_the_rows_finding(row: dict[str, str]) -> None:
    report = analyse(frame_all(_lines(row["example"]), "x.log"))
    found = {f.id for f in report.findings}
    assert row["id"] in found, f"{row['example']!r} gave {sorted(found)}"


@pytest.mark.parametrize("row", _params())
def test_the_role_agrees_with_the_rule(row: dict[str, str]) -> None:
    rule = RULES_BY_ID[row["id"]][0]
    role = row["role"]
    assert (role == "echo") == rule.secondary
    assert (role == "info") == (rule.severity == "info")
    assert (role == "wrapper") == (rule is EXCEPTION)
