"""A pure function of a line's text, remembered: a message printed by many ranks, or at every retry, is read once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
SIZE = 20_000  # texts remembered; forgotten all at once when full (memory stays bounded)
CHARS = 4 << 20  # ... or when the texts remembered hold this many characters (a log of distinct 64 KiB lines)


class Remembered(Generic[T]):
    """``read(text)``, kept for the texts seen lately (at most ``size`` texts, ``chars`` characters in all: a log
    of distinct 64 KiB lines must not fill memory); ``known`` is the dict itself, for a loop that runs once per
    line to try before the call."""

    def __init__(self, read: Callable[[str], T], size: int = SIZE, chars: int = CHARS) -> None:
        self.read = read
        self.size = size
        self.chars = chars
        self.held = 0  # characters in the texts remembered
        self.known: dict[str, T] = {}

    def __call__(self, text: str) -> T:
        found = self.known.get(text)
        if found is None:
            found = self.read(text)
            if len(self.known) >= self.size or self.held + len(text) > self.chars:
                self.known.clear()
                self.held = 0
            self.known[text] = found
            self.held += len(text)
        return found
