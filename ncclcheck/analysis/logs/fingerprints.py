"""TORCH_DISTRIBUTED_DEBUG=DETAIL's collective fingerprints, compared across ranks: which field differs (the
collective, its sequence number, the tensors' shapes, dtypes or device types) and, with three ranks or more,
which rank's value differs from the others' (the majority of the ranks seen).

Each rank that detects the mismatch prints its own fingerprint and one other rank's: "Rank 2 is running
collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[2, 4], TensorDtypes=Float,
TensorDeviceTypes=TensorOptions(... device=cpu ...)), but Rank 0 is running collective: ...".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncclcheck.model.ranks import span

RANK = re.compile(r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\(")
FIELDS = (
    ("op", "collective", re.compile(r"OpType=(\w+)")),
    ("seq", "sequence number", re.compile(r"SequenceNumber=(\d+)")),
    ("shape", "tensor shape", re.compile(r"TensorShape=(\[[^\]]*\](?:, \[[^\]]*\])*)")),
    ("dtype", "dtype", re.compile(r"TensorDtypes=(\w+(?:, (?!Tensor)\w+)*)")),
    ("device", "device type", re.compile(r"TensorDeviceTypes=.*?\bdevice=(\w+)")),
)
MAX_RANKS = 4096


def read(text: str) -> dict[int, dict[str, str]]:
    """The fingerprints a mismatch line prints: rank -> field -> value."""
    starts = list(RANK.finditer(text))
    out: dict[int, dict[str, str]] = {}
    for i, start in enumerate(starts):
        body = text[start.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        out.setdefault(int(start["rank"]), {k: m.group(1) for k, _, p in FIELDS if (m := p.search(body))})
    return out


@dataclass
class Fingerprints:
    """Each rank's fingerprint, the first one printed for it."""

    by_rank: dict[int, dict[str, str]] = field(default_factory=dict)

    def add(self, text: str) -> None:
        for rank, values in read(text).items():
            if len(self.by_rank) < MAX_RANKS:
                self.by_rank.setdefault(rank, values)

    def told(self) -> tuple[str, tuple[int, ...]] | None:
        """The mismatch in words, and the rank(s) whose values differ from the majority's (none on a tie)."""
        if len(self.by_rank) < 2:
            return None
        parts, odd = [], set()
        for key, noun, _ in FIELDS:
            values: dict[str, list[int]] = {}
            for rank, fingerprint in sorted(self.by_rank.items()):
                if key in fingerprint:
                    values.setdefault(fingerprint[key], []).append(rank)
            if len(values) < 2:
                continue
            text, culprits = _differ(noun, values)
            parts.append(text)
            odd |= culprits
        if not parts:
            return None
        ops = sorted({fp["op"] for fp in self.by_rank.values() if "op" in fp})
        seen = span(sorted(self.by_rank))
        head = f"ranks disagree in a collective ({'/'.join(ops)}; TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints of ranks {seen})"
        if odd:
            tail = f"rank(s) {span(sorted(odd))} differ from the other ranks seen: look there first"
        elif len(self.by_rank) == 2:
            tail = "with two ranks seen neither is the odd one out: which one took the wrong path cannot be told here"
        else:
            tail = "no value is shared by more ranks than another: which rank is wrong cannot be told here"
        return f"{head}: {'; '.join(parts)}; {tail}", tuple(sorted(odd))


def _differ(noun: str, values: dict[str, list[int]]) -> tuple[str, set[int]]:
    """ "tensor shape: rank 2 has [2, 4] while ranks 0-1 have [4, 2]" (the odd ranks first), or "rank 0 runs ALLREDUCE
    while rank 1 runs BROADCAST" (in rank order on a tie); and the odd ranks: the others of a strict majority."""
    groups = sorted(values.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    majority = len(groups[0][1]) > len(groups[1][1])
    odd = {r for _, rs in groups[1:] for r in rs} if majority else set()
    order = groups[1:] + groups[:1] if majority else sorted(groups, key=lambda kv: kv[1])
    verb = ("runs", "run") if noun == "collective" else ("has", "have")
    said = " while ".join(f"{_ranks(rs)} {verb[len(rs) > 1]} {value}" for value, rs in order)
    return (said if noun == "collective" else f"{noun}: {said}"), odd


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {span(ranks)}"
