"""The multi-node viewer's garbage collector: start-up left out of its walks, and full collections ten times rarer
(the minute of rounds the viewer holds has no cycles to find; docs/benchmarks.md has what it saves)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ncclcheck.commands.watch import nodes


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_start_up_is_frozen_and_full_collections_come_ten_times_less_often(collector: None) -> None:
    young, middle, _ = gc.get_threshold()
    nodes.freeze_start_up()
    assert gc.get_threshold() == (young, middle, nodes.FULL_EVERY) and nodes.FULL_EVERY >= 10 * 10
    assert gc.get_freeze_count() > 0
    held: list[object] = [[] for _ in range(10)]
    for a, b in zip(held, held[1:]):  # a cycle made after start-up is still collected in full
        a.append(b)  # type: ignore[attr-defined]
    held[-1].append(held[0])  # type: ignore[attr-defined]
    del held, a, b
    assert gc.collect() >= 10
