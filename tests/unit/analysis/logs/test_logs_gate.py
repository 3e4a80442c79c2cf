"""The block gate answers exactly what ``any(literal in block)`` answers, on blocks big enough to be sampled."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ncclcheck.analysis.logs.diagnose import GATE
from ncclcheck.analysis.logs.gate import SAMPLE, SLICES, SMALL, Gate

LITERALS = GATE.literals
# Characters of the literals and a few others, so anchors are sometimes absent, sometimes rare, sometimes common.
ALPHABET = "".join(sorted(set("".join(LITERALS)))) + "\n|.0123456789"


def plain(block: str) -> bool:
    return any(literal in block for literal in LITERALS)


@settings(max_examples=300, deadline=None)
@given(
    unit=st.text(alphabet=ALPHABET, min_size=1, max_size=300),
    inserts=st.lists(st.tuples(st.sampled_from(LITERALS), st.floats(0, 1), st.integers(0, 3)), max_size=3),
)
def test_gate_agrees_with_plain_search(unit: str, inserts: list[tuple[str, float, int]]) -> None:
    block = (unit * (SMALL * 3 // len(unit) + 1))[: SMALL * 3]
    for literal, where, cut in inserts:
        at = int(where * len(block))
        block = block[:at] + literal[cut:] + block[at:]  # a cut literal must not count
    assert GATE.hit(block) == plain(block)


def test_a_sample_that_misjudges_an_anchor_still_finds_the_literal() -> None:
    """The sampled slices hold no N, the rest of the block is full of them, and NCCL comes last: the walk over
    the Ns gives up for plain search instead of answering no."""
    size = 1 << 20
    step, part = size // SLICES, min(SAMPLE, size // 8) // SLICES
    block = "".join("x" * part + "N" * (step - part) for _ in range(SLICES)) + "NCCL"
    assert "NCCL" in LITERALS and GATE.hit(block)
    assert not GATE.hit(block[:-4] + "NCCx")


def test_inner_literals_replace_outer_ones() -> None:
    assert Gate.of(["NCCL", "NCCL error", "store"]).literals == ("NCCL", "store")
