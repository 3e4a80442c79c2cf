"""Fail-slow, pure, where a first version gave a wrong answer: agents' rounds with impossible counts."""

from __future__ import annotations

import dataclasses
import math

from test_watch_slow import N, compute_stack, view
from watch_states import sample, stack

from ncclcheck.analysis.watch.pooled import pooled
from ncclcheck.analysis.watch.shares import classify, tally
from ncclcheck.model.shares import Round, tally_from_json, tally_to_json
from ncclcheck.model.stacks import Frame
from ncclcheck.model.watch import RankView

GRAPH = "/env/lib/python3.11/site-packages/torch/autograd/graph.py"


def backward_stack() -> tuple[Frame, ...]:
    """DDP's backward: the autograd engine under the user's ``loss.backward()`` at train.py:60."""
    return (
        Frame("_engine_run_backward", GRAPH, 768),
        Frame("backward", "/env/lib/python3.11/site-packages/torch/_tensor.py", 581),
        Frame("main", "/job/train.py", 60),
    )


def spent(
    rank: int, shares: list[dict[tuple[Frame, ...], float]], host: str = "node0", offset: float = 0.0
) -> RankView:
    """A rank whose rounds (2 s, ``N`` samples, from t=1000) split their samples between stacks by the shares given
    (the rest in compute()); its main thread busy outside collectives."""
    tallies = []
    for i, parts in enumerate(shares):
        counts = {frames: round(share * N) for frames, share in parts.items()}
        rest = N - sum(counts.values())
        stacks = tuple((f, n) for f, n in [*counts.items(), (compute_stack(), rest)] if n)
        waited = sum(n for f, n in counts.items() if classify(f)[0] == "collective")
        start = 1000.0 + offset + 2.05 * i
        tallies.append(tally(Round(1, start, start + 2.0, stacks, 2.0 * (1 - waited / N))))
    s = dataclasses.replace(sample(rank, stack("all_reduce")), host=host)
    return RankView(s, "all_reduce", None, "all_reduce", 0, 0, 0, 0, 0, None, True, tallies=tuple(tallies))


# --- agents' rounds and the sums ---


def test_rounds_with_impossible_counts_are_not_read() -> None:
    good = tally_to_json(tally(Round(1, 1000.0, 1002.0, ((compute_stack(), 20),), 1.0)))
    for bad in (
        {"samples": -20, "kinds": {"other": -20}},
        {"kinds": {"collective": 30, "other": -10}},
        {"kinds": {"collective": 30}},
        {"start": math.nan},
        {"end": math.inf},
        {"start": 1003.0},
        {"cpu_s": -1.0},
        {"places": [["other", "compute", None, 40]]},
    ):
        assert tally_from_json({**good, **bad}) is None, bad
    assert tally_from_json(good) is not None


def test_two_views_of_one_rank_keep_their_own_sums() -> None:
    """The same (host, rank) twice (an old report beside a new one): each view's sums are its own rounds'."""
    first = view(0, [0.5] * 6)
    pooled([first])
    longer = dataclasses.replace(first, tallies=(*first.tallies, *view(0, [0.0] * 7).tallies[6:]))
    a, b = pooled([first, longer])
    assert a is not None and b is not None and (a.samples, b.samples) == (6 * N, 7 * N)
