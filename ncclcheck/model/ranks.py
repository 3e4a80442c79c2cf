"""Rank lists as people read them."""

from __future__ import annotations

from collections.abc import Sequence


def span(ranks: Sequence[int]) -> str:
    """``0-3,6`` for [0, 1, 2, 3, 6]."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
