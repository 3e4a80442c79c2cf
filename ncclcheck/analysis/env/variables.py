"""``env.vars``: misspelt, unknown, deprecated or removed NCCL_/TORCH_/GLOO_ names, and NCCL config files."""

from __future__ import annotations

import difflib

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.known_vars import KnownVar, KnownVars, known_vars
from ncclcheck.analysis.env.typed_values import accepts
from ncclcheck.analysis.env.values import value_issues
from ncclcheck.analysis.env.verdict import Issue, conclude, warn
from ncclcheck.analysis.nccl_rules import Version, version_text
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes._sysfs import parse_int
from ncclcheck.probes.envvars import EnvVar

TORCH_LINTED = (
    "TORCH_NCCL_",
    "TORCH_FR_",
    "TORCH_DISTRIBUTED_",
    "TORCH_DIST_",
    "TORCH_GLOO_",
    "TORCHELASTIC_",
    "TORCH_ELASTIC_",
)
LINTED = ("NCCL_", "GLOO_", *TORCH_LINTED)
SHOWN = (*LINTED, "TORCH_", "TP_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "MASTER_", "USE_LIBUV")
# Names people set for the process-group (collective) timeout, which no variable sets.
PG_TIMEOUT_NAMES = frozenset({"NCCL_TIMEOUT", "TORCH_NCCL_TIMEOUT", "NCCL_TIMEOUT_SEC", "TORCH_NCCL_TIMEOUT_SEC"})
REWRITES = {
    "NCCL_DEBUG_LEVEL": "NCCL_DEBUG",
    "NCCL_TRACE_BUFFER_SIZE": "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "GLOO_IFNAME": "GLOO_SOCKET_IFNAME",
    "NCCL_IFNAME": "NCCL_SOCKET_IFNAME",
}


def suggest(name: str, table: KnownVars) -> str | None:
    """The real name a misspelt one most likely means."""
    current = [n for n, v in table.by_name.items() if v.status in ("current", "deprecated")]
    candidates = [REWRITES.get(name), name.upper(), name.rstrip("S"), name.replace("IF_NAME", "IFNAME")]
    for candidate in candidates:
        if candidate and candidate != name and candidate in current:
            return candidate
    close = difflib.get_close_matches(name, current, n=1, cutoff=0.8)
    return close[0] if close else None


def check_variables(snapshot: NodeSnapshot, ctx: Context) -> Check:
    table = known_vars()
    shown = [v for v in snapshot.env.effective if v.name.startswith(SHOWN) or v.source != "environment"]
    details = [f"{v.name}={v.value}  ({ctx.sources.get(v.name, v.source)})" for v in shown]
    details += [
        f"{v.name}={v.value} in {v.source}:{v.line} is overridden by the environment" for v in snapshot.env.shadowed
    ]
    issues: list[Issue] = []
    for var in snapshot.env.effective:
        if var.name.startswith(LINTED) and var.name == var.name.strip():
            issues += name_issues(var.name, table, ctx.nccl, var.value)
    issues += conf_issues(snapshot, ctx) + value_issues(ctx, table)
    count = sum(1 for v in shown if v.name.startswith(LINTED))
    return conclude(
        env_ids.ENV_VARS, f"{count} NCCL/torch/gloo variable(s), no problem found", issues, details, fact=False
    )


def name_issues(name: str, table: KnownVars, nccl: Version | None, value: str = "") -> list[Issue]:
    """What is wrong with a variable's name: unknown, removed, deprecated, or too new for this NCCL."""
    known = table.lookup(name)
    if known is None:
        return [] if table.plugin_owned(name) else unknown_name_issues(name, value, table)
    replacement = known.replacement
    if known.status == "removed":
        instead = f"; use {replacement}" if replacement else ""
        return [
            warn(
                f"{name} is no longer read (last in {known.last_seen}){instead}",
                f"unset {name}" + (f" and set {replacement}" if replacement else ""),
            )
        ]
    if known.status == "deprecated":
        if known.note.startswith("deprecated alias"):
            return [warn(f"{name} is PyTorch's deprecated alias; NCCL never reads it", f"rename it to {replacement}")]
        return [warn(f"{name} is deprecated ({known.note})", f"use {replacement}" if replacement else f"unset {name}")]
    if nccl and known.first_seen and name.startswith("NCCL_") and known.first_seen > nccl:
        return [
            warn(
                f"{name} is not read by NCCL {version_text(nccl)} (added in {version_text(known.first_seen)})",
                f"upgrade NCCL to >= {version_text(known.first_seen)} or unset {name}",
            )
        ]
    return []


def unknown_name_issues(name: str, value: str, table: KnownVars) -> list[Issue]:
    """A name no reader reads: what it was meant to be, never a rename to a value the real name cannot take."""
    reader = "NCCL" if name.startswith("NCCL_") else "PyTorch/gloo"
    if name in PG_TIMEOUT_NAMES:
        return [pg_timeout_issue(name, value, reader)]
    hint = suggest(name, table)
    target = table.lookup(hint) if hint else None
    if hint and target and (not value or accepts(target, value)):
        return [warn(f"{name} is not a variable {reader} reads: did you mean {hint}?", f"rename {name} to {hint}")]
    if hint and target:
        return [
            warn(
                f"{name} is not a variable {reader} reads (ignored); the nearest name, {hint}, cannot take"
                f" {value!r} ({_what_it_takes(target)})",
                f"unset {name}; set {hint} only if you mean it, with a value it takes",
            )
        ]
    return [warn(f"{name} is not a variable {reader} reads (ignored)", f"unset {name}, or check its spelling")]


def pg_timeout_issue(name: str, value: str, reader: str) -> Issue:
    """A timeout variable no one reads: the collective timeout is the process group's, given in code."""
    seconds = parse_int(value)
    given = f"timedelta(seconds={seconds})" if seconds is not None and seconds > 0 else "timedelta(minutes=30)"
    return warn(
        f"{name}={value} is not a variable {reader} reads (ignored): a collective's timeout is the process"
        " group's, passed in code (PyTorch's default for NCCL is 10 min); NCCL_IB_TIMEOUT is something else,"
        " the exponent of one InfiniBand retry (4.096 us x 2^N, N in 1..31)",
        f"unset {name}; pass init_process_group(backend='nccl', timeout={given}) (or your framework's timeout"
        " setting); TORCH_NCCL_ASYNC_ERROR_HANDLING / TORCH_NCCL_BLOCKING_WAIT choose what happens when it fires",
    )


def _what_it_takes(known: KnownVar) -> str:
    if known.bounds:
        return f"an integer in {known.bounds[0]}..{known.bounds[1]}"
    if known.allowed:
        return f"one of {', '.join(known.allowed)}"
    return "an integer" if known.type == "int" else known.type


def conf_issues(snapshot: NodeSnapshot, ctx: Context) -> list[Issue]:
    """Traps of NCCL's config-file parser, and files that cannot be read."""
    issues: list[Issue] = []
    conf = ctx.env.get("NCCL_CONF_FILE")
    if conf and "~" in conf:
        issues.append(warn(f"NCCL_CONF_FILE={conf} contains '~', which NCCL does not expand", "give an absolute path"))
    for file in snapshot.env.conf_files:
        if conf and file.path == conf and not file.readable:
            issues.append(warn(f"NCCL_CONF_FILE={conf} cannot be read: NCCL ignores it", "fix the path or permissions"))
    for var in snapshot.env.effective + snapshot.env.shadowed:
        if var.source != "environment":
            issues += _conf_line_issues(var)
    return issues


def _conf_line_issues(var: EnvVar) -> list[Issue]:
    where = f"{var.source}:{var.line}"
    name = var.name
    if name.startswith("export "):
        return [
            warn(
                f"{where}: '{name}=...' defines a variable literally named '{name}'",
                f"drop 'export ' in {var.source}: {name[7:]}={var.value}",
            )
        ]
    if name != name.strip() or var.value != var.value.strip():
        return [
            warn(
                f"{where}: spaces around '=' become part of the name/value ('{name}'='{var.value}')",
                f"write {name.strip()}={var.value.strip()} in {var.source}",
            )
        ]
    if name != name.upper() and name.upper().startswith(LINTED):
        return [
            warn(
                f"{where}: {name} is lower-case; NCCL reads names case-sensitively",
                f"write {name.upper()} in {var.source}",
            )
        ]
    return []
