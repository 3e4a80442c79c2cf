"""Each NCCL variable's value against its type in the table: integers as strtoll reads them, ranges, names.

The type of every variable is the ``type``/``allowed`` columns of ncclcheck/data/env_vars.tsv, read from how
NCCL reads it (an ``NCCL_PARAM`` is an int64 parsed with strtoll; a getenv one with the parser named there).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ncclcheck.analysis.env.known_vars import KnownVar, KnownVars
from ncclcheck.analysis.env.verdict import Issue, fail, warn
from ncclcheck.analysis.nccl_rules import nccl_int
from ncclcheck.probes._sysfs import parse_int

YES = {"y", "yes", "t", "true", "on"}
BOOLS = {"y", "yes", "1", "t", "true", "n", "no", "0", "f", "false"}  # what PyTorch's getCvarBool takes
NTHREADS = (64, 128, 256, 512)
# Checked by another check, which says it with its context (the interface NCCL picks).
CHECKED_ELSEWHERE = frozenset({"NCCL_SOCKET_FAMILY"})
NAMED = ("name", "exact", "level", "net")


def typed_issues(env: Mapping[str, str], table: KnownVars) -> list[Issue]:
    """Every NCCL variable whose value its type does not allow, said once."""
    issues: list[Issue] = []
    for name, value in sorted(env.items()):
        known = table.lookup(name)
        if known is None or not name.startswith("NCCL_") or not value or name in CHECKED_ELSEWHERE:
            continue
        if known.type == "int":
            issues += _int_issues(known, value)
        elif known.type in NAMED:
            issues += _name_issues(known, value, env)
    return issues + _thread_issues(env)


def accepts(known: KnownVar, value: str) -> bool:
    """Whether ``value`` is one the variable can really take (its type, its range, its names)."""
    if known.type == "int" and known.name.startswith("NCCL_"):
        parsed = nccl_int(value)
        bounds = known.bounds
        return parsed.exact and (bounds is None or bounds[0] <= parsed.value <= bounds[1])
    if known.type in NAMED:
        return not _name_issues(known, value, {})
    if known.kind == "bool":
        return value.strip().lower() in BOOLS
    return known.kind != "int" or parse_int(value) is not None


def _int_issues(known: KnownVar, value: str) -> list[Issue]:
    name = known.name
    parsed = nccl_int(value)
    bounds = known.bounds
    if parsed.exact:
        if bounds and not bounds[0] <= parsed.value <= bounds[1]:
            low, high = bounds
            return [warn(f"{name}={value} is outside {low}..{high}", f"unset {name} or use {low}..{high}")]
        return []
    does = _what_nccl_does(name, parsed.value)
    if parsed.overflow:
        text = f"{name}={value} is out of range: NCCL ignores it and keeps its default"
    elif not parsed.digits:
        text = f"{name}={value} is not a number: NCCL reads it as 0{does}"
    else:
        text = f"{name}={value} is not a plain number: NCCL reads only its leading number, {parsed.value}{does}"
    meant_yes = value.strip().lower() in YES and parsed.value == 0 and name.endswith(("_DISABLE", "_ENABLE"))
    turn = "disable" if name.endswith("_DISABLE") else "enable"
    fix = f"write {name} as a plain integer (NCCL parses it with strtoll)" + (
        f": {name}=1 to {turn} it" if meant_yes else ""
    )
    return [fail(text, fix) if meant_yes or name == "NCCL_IB_GID_INDEX" else warn(text, fix)]


def _what_nccl_does(name: str, value: int) -> str:
    if name.endswith("_DISABLE"):
        what = name[len("NCCL_") : -len("_DISABLE")].replace("_", " ")
        return f": {what} stays ON" if value == 0 else f": {what} is disabled" if value == 1 else ""
    if name.endswith("_ENABLE"):
        return ": it is off" if value == 0 else ""
    if name == "NCCL_IB_GID_INDEX":
        return f": GID index {value}" + (" (link-local on RoCE, not routable between nodes)" if value == 0 else "")
    if name.endswith("NTHREADS"):
        return " and keeps its default thread count"
    return ""


def _name_issues(known: KnownVar, value: str, env: Mapping[str, str]) -> list[Issue]:
    name, allowed = known.name, known.allowed
    exact = known.type in ("exact", "level")
    if value in allowed or (not exact and value.lower() in {a.lower() for a in allowed}):
        return []
    if known.type == "level" and nccl_int(value).exact:
        return []
    guess = closest(value, allowed)
    listed = ", ".join(allowed)
    if known.type == "net":
        plugin = bool(env.get("NCCL_NET_PLUGIN"))
        return [] if plugin and not guess else [_net_issue(name, value, listed, guess, plugin)]
    case = "exact, case-sensitive" if exact else "case does not matter"
    return [
        warn(
            f"{name}={value} is not a value NCCL knows ({listed}; {case}): NCCL ignores it"
            + (f"; did you mean {guess}?" if guess else ""),
            f"use {name}={guess}" if guess else f"use one of {listed}, or unset {name}",
        )
    ]


def _net_issue(name: str, value: str, listed: str, guess: str | None, plugin: bool) -> Issue:
    if guess and not plugin:
        return fail(
            f"{name}={value} names no network NCCL has (built in: {listed}): did you mean {guess}?"
            " NCCL fails init with 'Failed to initialize any NET plugin'",
            f"use {name}={guess}",
        )
    return warn(
        f"{name}={value} is not a built-in network ({listed}): init fails with 'Failed to initialize any NET"
        " plugin' unless a loaded net plugin has that name",
        f"use the name the net plugin logs (NCCL_DEBUG=INFO: 'NET/<name>'), or one of {listed}",
    )


def closest(word: str, names: tuple[str, ...]) -> str | None:
    """The allowed name ``word`` most likely means, in the table's spelling (case does not count)."""
    by_lower = {n.lower(): n for n in names}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def _thread_issues(env: Mapping[str, str]) -> list[Issue]:
    issues = []
    nthreads = env.get("NCCL_NTHREADS")
    if nthreads and nccl_int(nthreads).exact and nccl_int(nthreads).value not in NTHREADS:
        issues.append(
            warn(
                f"NCCL_NTHREADS={nthreads} is not one of {', '.join(map(str, NTHREADS))}: NCCL ignores it or rounds it",
                "unset NCCL_NTHREADS",
            )
        )
    threads = nccl_int(env.get("NCCL_SOCKET_NTHREADS", "")).value
    socks = nccl_int(env.get("NCCL_NSOCKS_PERTHREAD", "")).value
    if threads and socks and threads * socks > 64:
        issues.append(
            warn(
                f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = {threads * socks} > 64; NCCL clamps it",
                "keep the product at or below 64",
            )
        )
    return issues
