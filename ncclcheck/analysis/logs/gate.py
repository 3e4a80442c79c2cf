"""Does a block of log text hold any of a set of literals? Answered at memchr speed for most blocks.

Testing ``literal in block`` for each of 30-odd literals costs 30-odd full passes (about 1-3 ms per
4 MiB each, whatever the literal). Instead each literal is anchored on its rarest character in *this*
block (counted on a sample): a character absent from the block rules out every literal anchored on it
in one memchr pass (about 0.05 ms per 4 MiB), and a rare one is checked only where it occurs. A
character too common to walk (by the sample's count) falls back to plain ``in`` for its literals, so the
worst case costs about what testing every literal costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SAMPLE = 64 << 10  # at most this many characters are counted to rank a block's characters by rarity
SLICES = 16  # the sample's slices, spread over the block
# Checking n literals at one occurrence of their anchor costs about (n + 1) * 200 ns; a plain ``in`` pass,
# about 0.3 ns per character for each literal. So walking pays while the anchor occurs at most
# n / (n + 1) times per WALK_PER characters.
WALK_PER = 700
SMALL = 4 << 10  # below this, plain ``in`` for every literal is as cheap


@dataclass(frozen=True)
class Gate:
    """The literals to look for; ``hit(block)`` says whether any occurs."""

    literals: tuple[str, ...]
    chars: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chars", frozenset("".join(self.literals)))

    @classmethod
    def of(cls, literals: Iterable[str]) -> Gate:
        """Keep only literals no other one is inside of (finding the inner one is enough), the shortest first:
        the commonest ("NCCL" in a block of NCCL lines) are short, and a hit ends the search."""
        found = set(literals)
        kept = (t for t in found if t and not any(o != t and o in t for o in found))
        return cls(tuple(sorted(kept, key=lambda t: (len(t), t))))

    def hit(self, block: str) -> bool:
        if len(block) < SMALL:
            return any(literal in block for literal in self.literals)
        head = block[:SMALL]
        if any(literal in head for literal in self.literals):
            return True  # a block of NCCL lines says so in its first lines: no sampling
        part, step = min(SAMPLE, len(block) // 8) // SLICES, len(block) // SLICES
        sample = "".join(block[i : i + part] for i in range(0, step * SLICES, step))
        counts = {c: sample.count(c) for c in self.chars}
        anchored: dict[str, list[tuple[str, int]]] = {}
        for literal in self.literals:
            rarest = min(literal, key=counts.__getitem__)
            anchored.setdefault(rarest, []).append((literal, literal.index(rarest)))
        scale = len(block) / max(len(sample), 1)
        return any(
            _anchored_hit(block, anchor, group, limit)
            if counts[anchor] * scale <= (limit := len(group) * len(block) // (WALK_PER * (len(group) + 1)))
            else any(literal in block for literal, _ in group)
            for anchor, group in anchored.items()
        )


def _anchored_hit(block: str, anchor: str, group: list[tuple[str, int]], limit: int) -> bool:
    """Whether a literal of ``group`` (each with its anchor's offset in it) occurs in ``block``."""
    at = block.find(anchor)
    walked = 0
    while at >= 0:
        for literal, offset in group:
            if at >= offset and block.startswith(literal, at - offset):
                return True
        walked += 1
        if walked > limit:  # the sample misjudged: finish with plain ``in``
            return any(literal in block for literal, _ in group)
        at = block.find(anchor, at + 1)
    return False
