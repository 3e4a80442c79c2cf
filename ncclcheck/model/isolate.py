"""Frozen data of ``smoke --isolate``: the stages it ran on groups of nodes, their results, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

# alone: each node by itself; pairs: nodes two by two; swap: a suspect with a node that passed with others;
# halves: each half of a set; boundary: two halves that pass alone, together; cross: parts of two halves across;
# confirm: every node but the one named together (a second fault elsewhere shows there).
StageKind = Literal["alone", "pairs", "swap", "halves", "boundary", "cross", "confirm", "again"]
ALONE: Final = "alone"
PAIRS: Final = "pairs"
SWAP: Final = "swap"
HALVES: Final = "halves"
BOUNDARY: Final = "boundary"
CROSS: Final = "cross"
CONFIRM: Final = "confirm"
AGAIN: Final = "again"  # a pair that was only slow, run once more before a link is named

# healthy: every stage passed, nobody named; node: one node; link: one pair of nodes; not_single: no single node or
# link explains what failed.
IsolateVerdictKind = Literal["healthy", "node", "link", "not_single"]
HEALTHY: Final = "healthy"
NODE: Final = "node"
LINK: Final = "link"
NOT_SINGLE: Final = "not_single"


@dataclass(frozen=True)
class Stage:
    """One run on every node it names: its groups are disjoint sets of node ranks, each its own job, all at once."""

    kind: StageKind
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class GroupRun:
    """What one group's job did: ``completed`` when every node's smoke passed (every element verified), and the
    busbw of each op at its largest size (empty when the job did not finish or has one rank)."""

    nodes: tuple[int, ...]
    completed: bool
    busbw_gbps: tuple[tuple[str, float], ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class StageResult:
    stage: Stage
    runs: tuple[GroupRun, ...]


@dataclass(frozen=True)
class Judged:
    """A group run judged against the busbw floor of its stage: ``passed`` = completed and no op below its floor."""

    run: GroupRun
    passed: bool
    slow_ops: tuple[tuple[str, float, float], ...]  # (op, busbw, floor) of each op below its floor


@dataclass(frozen=True)
class IsolateVerdict:
    """What the stages name: a node, a link (two nodes), several suspects that are not one node or link, or none."""

    kind: IsolateVerdictKind
    nodes: tuple[int, ...]
    message: str
    # beside a node or link named from groups that never completed: the nodes of the group(s) run without it that
    # completed but ran under a floor the other groups set, twice (a second, slower fault among them, or a loaded
    # node: the stages cannot tell which)
    also_slow: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """As node 0 posts it to the other nodes (and the JSON report spells it, with the nodes' hosts)."""
        return {
            "kind": self.kind,
            "nodes": list(self.nodes),
            "message": self.message,
            "also_slow": list(self.also_slow),
        }


def verdict_from_json(data: dict[str, Any]) -> IsolateVerdict:
    """A verdict as ``IsolateVerdict.to_json`` wrote it."""
    return IsolateVerdict(data["kind"], tuple(data["nodes"]), str(data["message"]), tuple(data.get("also_slow", ())))
