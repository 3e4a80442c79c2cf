"""Fail-slow where the job-wide comparison names nobody: along a pipeline, and within each known process group.

- **A pipeline.** Stages wait for each other in send/recv, not in a collective, so the job-wide judgement (waiting
  in collectives) sees none of it. Counted again with send/recv as waiting too (a stage's wait in a collective of
  its data-parallel group still counts), the slow stage is the one whose neighbours wait for it: its share of
  waiting sits clearly below the other stages', under every test the job-wide judgement makes (a clear gap, beyond
  chance, in each part of the window, at most half the ranks). A balanced pipeline (every stage's bubbles alike),
  and one whose first stage loads data by design (its time in the DataLoader is its work, as the others' compute
  is theirs: what matters is whether the others wait for it more than for each other), name nobody.
- **Within a process group.** Where the members of the job's groups are known (a Flight Recorder's ``pg_config``,
  ``ncclcheck run``'s control plane), each group's members are compared with each other only: a rank slow inside
  its tensor-parallel group is named although the other groups, not synchronised with it, wait for nobody.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence

from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.shares import Tally
from ncclcheck.model.watch import RankView

Judged = tuple[tuple[Finding, ...], tuple[tuple[int, float], ...]]
Judge = Callable[[Sequence[RankView]], Judged]
Groups = tuple[frozenset[int], ...]  # the job's process groups, each its members' global ranks

SLOW = frozenset({watch_ids.SLOW_RANK, watch_ids.SLOW_NODE})  # the warnings that a rank or node holds the job back
PIPELINE_FIX = (
    "balance the stages: move layers from the slow stage to its neighbours (the model's partition), or see what it "
    "computes that the other stages do not; more micro-batches shrink the bubbles but not a slow stage's excess"
)


def pipelined(waits: Iterable[tuple[int, int]]) -> bool:
    """Whether some rank waits in send/recv: ``waits`` is each rank's (samples in send/recv, samples)."""
    return any(samples and p2p * 20 >= samples for p2p, samples in waits)  # 5 %: half a part's difference


def along_pipeline(views: Sequence[RankView], judge: Judge) -> Judged:
    """The slow stage of a pipeline (send/recv counted as waiting), or nothing; and the stages that may be."""
    counted = [dataclasses.replace(v, tallies=tuple(_p2p_as_waiting(t) for t in v.tallies)) for v in views]
    found, behind = judge(counted)
    named = tuple(
        _worded(f, "Along the pipeline (stages wait for each other in send/recv)", PIPELINE_FIX)
        for f in found
        if f.id in SLOW
    )
    return named, () if named else behind


def within_groups(views: Sequence[RankView], groups: Collection[frozenset[int]], judge: Judge) -> Judged:
    """The slow rank of each known process group (two ranks or more, not the whole job, every member seen), each
    named once (by its smallest group); and the ranks that may be, by the first group that has any."""
    by_rank = {v.rank: v for v in views}
    named: dict[tuple[int, ...], Finding] = {}
    behind: tuple[tuple[int, float], ...] = ()
    for members in sorted(set(groups), key=lambda g: (len(g), sorted(g))):
        if not 2 <= len(members) < len(by_rank) or not members <= by_rank.keys():
            continue
        found, maybe = judge([by_rank[r] for r in sorted(members)])
        for f in found:
            if f.id in SLOW and f.culprits not in named:
                named[f.culprits] = _worded(f, f"In process group ranks {span(sorted(members))}", "")
        behind = behind or maybe
    return tuple(named.values()), () if named else behind


def _worded(f: Finding, where: str, fix: str) -> Finding:
    return dataclasses.replace(f, message=f"{where}: {f.message}", fix=f"{fix}; {f.fix}" if fix else f.fix)


def _p2p_as_waiting(t: Tally) -> Tally:
    """A round with its samples in send/recv counted as waiting (kind ``collective``, their place kept)."""
    p2p = t.count("p2p")
    if not p2p:
        return t
    kinds = [(k, n) for k, n in t.kinds if k not in ("collective", "p2p")]
    places = tuple(p._replace(kind="collective") if p.kind == "p2p" else p for p in t.places)
    return t._replace(kinds=(("collective", t.waited + p2p), *kinds), places=places)
