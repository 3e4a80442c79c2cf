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

from ncclcheck.analysis.nccl_rules import Version


@dataclass(frozen=True)
class KnownVar:
    """One documented or source-read variable."""

    name: str
    status: str
    first_seen: Version | None
    last_seen: str
    note: str
    how_read: str = ""  # NCCL_PARAM: an integer NCCL parses with strtoll; getenv: NCCL reads the text itself

    @property
    def kind(self) -> str | None:
        """``bool`` or ``int`` when PyTorch parses the value strictly (raises on garbage)."""
        match = re.match(r"(bool|int)\b", self.note)
        return match.group(1) if match else None

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
    """Parse the TSV (name, source, first_seen_tag, last_seen_tag, status, how_read, documented, note)."""
    rows: dict[str, KnownVar] = {}
    prefixes: list[str] = []
    for line in text.splitlines()[1:]:
        cols = line.split("\t") + [""] * 8
        name, first, last, status, how, note = cols[0], cols[2], cols[3], cols[4], cols[5], cols[7]
        if not name:
            continue
        if name.endswith("*"):
            prefixes.append(name.rstrip("*"))
            continue
        rows[name] = KnownVar(name, status, _tag(first), last, note, how)
    return KnownVars(MappingProxyType(rows), tuple(prefixes))


@cache
def known_vars() -> KnownVars:
    text = resources.files("ncclcheck").joinpath("data/env_vars.tsv").read_text(encoding="utf-8")
    return parse_table(text)
