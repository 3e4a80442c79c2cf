"""The ids of ``run``'s own findings (analysis/run), and the root causes its verdict names where no finding does;
``run`` also reports ``watch``'s ids (the hangs and slow episodes it saw live) and ``logs``' (its job's logs)."""

from __future__ import annotations

from typing import Final

RANK_LEFT_EARLY: Final = "rank-left-early"
ABORTED_AT_EXIT: Final = "aborted-at-exit"
# a verdict's root_cause with no finding behind it
HANG: Final = "hang"  # a hang caught live whose record names no kind
INTERRUPTED: Final = "interrupted"  # ^C before any hang was seen
EXIT_CODE: Final = "exit-code"  # a failed job whose output names no known error
