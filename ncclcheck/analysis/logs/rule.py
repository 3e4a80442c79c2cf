"""A rule of the message catalogue: a literal prefilter, a regex, a finding id, and what to tell the user.

Its own module so that the catalogue can live in several modules (rules.py, gpu_rules.py, exit_rules.py) that
all build their rules the same way; rules.py gathers them into one table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ncclcheck.model.findings import Severity


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    literal: str
    pattern: re.Pattern[str]
    message: str
    fix: str
    secondary: bool = False
    # the rank that prints it is the one at fault: its own call failed a check before any data moved (gloo's
    # argument checks), so it is the culprit, never a rank that waited on another
    own: bool = False


def make_rule(
    fid: str,
    severity: Severity,
    literal: str,
    regex: str,
    message: str,
    fix: str,
    secondary: bool = False,
    own: bool = False,
) -> Rule:
    """A Rule with its regex compiled."""
    return Rule(fid, severity, literal, re.compile(regex), message, fix, secondary, own)
