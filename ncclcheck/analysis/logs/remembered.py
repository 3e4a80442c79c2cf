"""A pure function of a line's text, remembered: a message printed by many ranks, or at every retry, is read once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
SIZE = 20_000  # texts remembered; forgotten all at once when full (memory stays bounded)


class Remembered(Generic[T]):
    """``read(text)``, kept for the texts seen lately; ``known`` is the dict itself, for a loop that runs once per
    line to try before the call."""

    def __init__(self, read: Callable[[str], T], size: int = SIZE) -> None:
        self.read = read
        self.size = size
        self.known: dict[str, T] = {}

    def __call__(self, text: str) -> T:
        found = self.known.get(text)
        if found is None:
            if len(self.known) >= self.size:
                self.known.clear()
            found = self.known[text] = self.read(text)
        return found
