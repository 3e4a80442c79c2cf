"""The table of every NCCL_/TORCH_/GLOO_ variable name NCCL and PyTorch read, with status and versions.

Source: shared/reference/nccl_env_vars_detail.tsv (NVIDIA/nccl v2.3.5..v2.30.7, torch 2.15.0),
shipped as ncclcheck/data/env_vars.tsv. A constant table: read once, never changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Literal, get_args

from ncclcheck.analysis.nccl_rules import Version

# How the reader parses a value (the table's ``type`` column):
#   int    NCCL: strtoll, base 0 (an NCCL_PARAM); PyTorch: a strict integer (raises on garbage)
#   bool   PyTorch's strict boolean (1/0, true/false, y/n, ...)
#   name   one of ``allowed``, case-insensitive (strcasecmp); anything else is ignored
#   exact  one of ``allowed``, case-sensitive (strcmp)
#   level  one of ``allowed`` (case-sensitive) or an integer (ncclGetLevel)
#   names  a comma list of ``allowed`` names (NCCL_ALGO / NCCL_PROTO / NCCL_DEBUG_SUBSYS grammar)
#   net    a built-in network (``allowed``) or the name of a loaded net plugin (strcasecmp)
#   text   free text: paths, interface lists, plugin names; not checked
ValueType = Literal["int", "bool", "name", "exact", "level", "names", "net", "text"]
VALUE_TYPES: tuple[ValueType, ...] = get_args(ValueType)


@dataclass(frozen=True)
class KnownVar:
    """One documented or source-read variable."""

    name: str
    status: str
    first_seen: Version | None
    last_seen: str
    note: str
    how_read: str = ""  # NCCL_PARAM: an integer NCCL parses with strtoll; getenv: NCCL reads the text itself
    type: ValueType = "text"
    allowed: tuple[str, ...] = ()  # the names a name-typed value may take, or ("LOW..HIGH",) for an int

    @property
    def kind(self) -> str | None:
        """``bool`` or ``int`` when PyTorch parses the value strictly (raises on garbage)."""
        return self.type if self.type in ("bool", "int") and not self.name.startswith("NCCL_") else None

    @property
    def bounds(self) -> tuple[int, int] | None:
        """The inclusive range an integer setting supports, when the table gives one."""
        match = re.fullmatch(r"(-?\d+)\.\.(-?\d+)", self.allowed[0]) if self.type == "int" and self.allowed else None
        return (int(match[1]), int(match[2])) if match else None

    @property
    def replacement(self) -> str | None:
        """The name to use instead, when the note names one."""
        match = re.search(r"(?:->|use|alias|to)\s+((?:TORCH_|NCCL_)[A-Z0-9_]+)", self.note)
        return match.group(1) if match else None


@dataclass(frozen=True)
class KnownVars:
    by_name: Mapping[str, KnownVar]
    plugin_prefixes: tuple[str, ...]

    def lookup(self, name: str) -> KnownVar | None:
        return self.by_name.get(name)

    def plugin_owned(self, name: str) -> bool:
        return name.startswith(self.plugin_prefixes)


def _tag(text: str) -> Version | None:
    match = re.match(r"v(\d+)\.(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def parse_table(text: str) -> KnownVars:
    """Parse the TSV (name, source, first_seen_tag, last_seen_tag, status, how_read, documented, note, type, allowed)."""
    rows: dict[str, KnownVar] = {}
    prefixes: list[str] = []
    for line in text.splitlines()[1:]:
        cols = line.split("\t") + [""] * 10
        name, first, last, status, how, note = cols[0], cols[2], cols[3], cols[4], cols[5], cols[7]
        if not name:
            continue
        if name.endswith("*"):
            prefixes.append(name.rstrip("*"))
            continue
        rows[name] = KnownVar(name, status, _tag(first), last, note, how, _type(cols[8]), _allowed(cols[9]))
    return KnownVars(MappingProxyType(rows), tuple(prefixes))


def _type(text: str) -> ValueType:
    return next((t for t in VALUE_TYPES if t == text), "text")


def _allowed(text: str) -> tuple[str, ...]:
    return tuple(n for n in text.split("|") if n)


@cache
def known_vars() -> KnownVars:
    text = resources.files("ncclcheck").joinpath("data/env_vars.tsv").read_text(encoding="utf-8")
    return parse_table(text)
