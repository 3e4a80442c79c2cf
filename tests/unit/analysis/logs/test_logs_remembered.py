"""The per-text memo the log reader keeps: a repeated text is read once, memory stays bounded on any input."""

from __future__ import annotations

from ncclcheck.analysis.logs.prefixes import parts
from ncclcheck.analysis.logs.remembered import Remembered


def counting() -> tuple[Remembered[str], list[str]]:
    calls: list[str] = []

    def read(text: str) -> str:
        calls.append(text)
        return text.upper()

    return Remembered(read, size=3), calls


def test_a_repeated_text_is_read_once() -> None:
    memo, calls = counting()
    assert [memo("a"), memo("a"), memo("b"), memo("a")] == ["A", "A", "B", "A"]
    assert calls == ["a", "b"]


def test_long_texts_are_forgotten_by_their_size() -> None:
    """A log of distinct 64 KiB lines would otherwise keep 20,000 of them (1.3 GB)."""
    calls: list[str] = []
    memo = Remembered(lambda text: calls.append(text) or len(text), size=100, chars=10)
    assert [memo("abcd"), memo("abcd"), memo("efgh")] == [4, 4, 4] and calls == ["abcd", "efgh"]
    memo("ijk")  # 11 characters: the memo starts over
    assert list(memo.known) == ["ijk"] and memo.held == 3
    assert memo("x" * 20) == 20 and list(memo.known) == ["x" * 20]  # one longer than all: kept alone


def test_a_full_memo_is_forgotten_at_once() -> None:
    memo, calls = counting()
    for text in "abcd":
        memo(text)
    assert len(memo.known) <= 3 and "d" in memo.known
    memo("a")
    assert calls == ["a", "b", "c", "d", "a"]


def test_text_behind_torchruns_prefix_is_framed_as_the_whole_line_is() -> None:
    """``parts`` reads the rest behind ``[rankN]:`` once for every rank: the result is the one framing the
    whole line gives (the prefix's rank wins over an inner one; ANSI residue and CR go; 8 prefixes at most)."""
    from ncclcheck.analysis.logs.prefixes import _parts

    lines = [
        "[rank3]:node1:55:66 [2] NCCL INFO Using network IB",
        "[rank3]:[1,4]<stdout>:node1:55:66 [2] NCCL WARN Call to connect returned Connection refused",
        "[default7]:[rank2]:Traceback (most recent call last):",
        "[rank1]:\x1b[31mRuntimeError: boom\x1b[0m",
        "[rank1]:[0m RuntimeError: boom",
        "[rank1]: \rValueError: x",
        "[rank0]:" + "[rank1]:" * 9 + "left",
        "[rank12]:",
    ]
    for line in lines:
        assert parts(line) == _parts(line, 8), line
        assert parts(line) == parts(line)  # the second time from the memo
