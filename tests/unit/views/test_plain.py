"""``plain`` is ``dataclasses.asdict`` for the classes it is used on: each of their fields holds a plain value."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from ncclcheck.model.logs import ChildFailure, Event, Timeout
from ncclcheck.views.plain import plain

PLAIN = {str, int, float, bool, type(None)}


@pytest.mark.parametrize("kind", [Timeout, ChildFailure, Event])
def test_every_field_of_a_class_plain_renders_holds_a_plain_value(kind: type) -> None:
    for name, hint in typing.get_type_hints(kind).items():
        assert set(typing.get_args(hint) or (hint,)) <= PLAIN, f"{kind.__name__}.{name}: {hint}"


def test_plain_gives_what_asdict_gives() -> None:
    items = [
        Timeout(3, "0", 91, "ALLREDUCE", 1, 1, 600000, 600512, "r.log", 7, group_rank=1, pg_desc="tp"),
        Timeout(None, None, 2, "BROADCAST", None, None, None, None, "r.log", 8),
        ChildFailure(5, 1, "node2", -6, "SIGABRT", True, "2026-11-24_15:23:15", 1, 4242, "1124 15:23:15.686"),
        Event("r.log", 9, "nccl", "error", 2, "node1", None, "NCCL WARN socketProgress: Connection closed"),
    ]
    for item in items:
        assert plain(item) == dataclasses.asdict(item)
        assert list(plain(item)) == list(dataclasses.asdict(item))  # the same keys in the same order


def test_a_nested_field_is_caught() -> None:  # the guard above can fail
    @dataclasses.dataclass(frozen=True)
    class Nested:
        inner: tuple[int, ...]

    with pytest.raises(AssertionError):
        test_every_field_of_a_class_plain_renders_holds_a_plain_value(Nested)
