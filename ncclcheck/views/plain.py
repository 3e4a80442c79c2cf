"""A frozen dataclass of plain values (str, int, float, bool, None) as a JSON object.

``dataclasses.asdict`` gives the same object but deep-copies every value on the way: a logs report holding ten
thousand timeouts and torchrun failures spent a fifth of a second there, alone on one core at the end of the run.
Only for classes whose fields are plain values (tests/unit/views/test_plain.py checks each class it is used on).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@cache
def _names(kind: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


def plain(item: DataclassInstance) -> dict[str, Any]:
    """``dataclasses.asdict(item)`` of a dataclass of plain values, without copying them."""
    return {name: getattr(item, name) for name in _names(type(item))}
