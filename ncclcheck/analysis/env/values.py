"""Values of NCCL_/TORCH_ variables: leftovers that cost speed, contradictions, and values NCCL ignores."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.known_vars import KnownVars
from ncclcheck.analysis.env.verdict import Issue, fail, warn
from ncclcheck.analysis.nccl_rules import nccl_int
from ncclcheck.probes._sysfs import parse_int

BOOLS = {"y", "yes", "1", "t", "true", "n", "no", "0", "f", "false"}
LEVELS = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"}
DEBUG = {"VERSION", "WARN", "INFO", "ABORT", "TRACE"}
SUBSYS = {
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "ALLOC_HOST",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",
    "ALL",
}
ALGOS = ("Ring", "Tree", "CollnetChain", "CollnetDirect", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
NTHREADS = (64, 128, 256, 512)
YES = {"y", "yes", "t", "true", "on"}
RANGES = {
    "NCCL_IB_TIMEOUT": (1, 31),
    "NCCL_IB_RETRY_CNT": (0, 7),
    "NCCL_SOCKET_NTHREADS": (1, 16),
    "NCCL_IB_QPS_PER_CONNECTION": (1, 128),
    "NCCL_MAX_CTAS": (1, 64),
    "NCCL_MIN_CTAS": (1, 64),
}
# Debugging variables NCCL's docs say not to keep set in production, and what they cost.
LEFTOVERS = {
    "NCCL_P2P_DISABLE": "disables NVLink/PCIe peer-to-peer: intra-node traffic goes through host memory",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport: intra-node traffic goes through the NIC",
    "NCCL_IB_DISABLE": "disables InfiniBand/RoCE: inter-node traffic uses TCP sockets (often 10x slower or worse)",
    "NCCL_NET_GDR_LEVEL": "overrides NCCL's GPUDirect RDMA decision",
    "NCCL_NET_GDR_READ": "overrides NCCL's GPUDirect RDMA read decision",
    "NCCL_P2P_LEVEL": "overrides NCCL's topology-based peer-to-peer choice",
    "NCCL_ALGO": "forces collective algorithms; NCCL's docs discourage it (wrong choices can corrupt data)",
    "NCCL_PROTO": "forces protocols; enabling LL128 where unsupported can corrupt data",
}


def value_issues(ctx: Context, table: KnownVars) -> list[Issue]:
    env = ctx.env
    issues = _leftovers(env, ctx) + _contradictions(env) + _nccl_values(ctx) + _nccl_params(env, table)
    issues += _torch_values(env, table)
    if "NCCL_COMM_ID" in env:
        issues.append(
            warn(
                f"NCCL_COMM_ID={env['NCCL_COMM_ID']} forces one bootstrap root; under torch.distributed"
                " every communicator rendezvouses on the same port",
                "unset NCCL_COMM_ID",
            )
        )
    return issues


def is_set_to_one(env: Mapping[str, str], name: str) -> bool:
    """Whether NCCL reads ``name`` as 1 (a ``*_DISABLE`` that disables): ``1``, ``01``, ``0x1``, ``1 ``."""
    value = env.get(name)
    return bool(value) and nccl_int(value or "").value == 1


def _leftovers(env: Mapping[str, str], ctx: Context) -> list[Issue]:
    issues = []
    invalid = {name for name, _ in _bad_tokens(ctx)}  # said once, by the value check
    for name, cost in LEFTOVERS.items():
        value = env.get(name)
        if value is None or (name.endswith("_DISABLE") and not is_set_to_one(env, name)) or name in invalid:
            continue
        issues.append(warn(f"{name}={value} {cost}", f"unset {name} unless it works around a known problem"))
    if env.get("TORCH_NCCL_ENABLE_MONITORING", "").lower() in ("0", "false", "n", "no", "f"):
        issues.append(
            warn(
                "TORCH_NCCL_ENABLE_MONITORING=0: a hung collective is never aborted by the watchdog",
                "unset TORCH_NCCL_ENABLE_MONITORING",
            )
        )
    return issues


def _contradictions(env: Mapping[str, str]) -> list[Issue]:
    issues = []
    ib_off = is_set_to_one(env, "NCCL_IB_DISABLE")
    for other in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX"):
        if ib_off and other in env:
            issues.append(
                warn(
                    f"NCCL_IB_DISABLE=1 but {other} is set: IB is off, so {other} does nothing",
                    f"decide: unset NCCL_IB_DISABLE to use IB, or unset {other}",
                )
            )
    if ib_off and env.get("NCCL_NET") == "IB":
        issues.append(
            fail(
                "NCCL_IB_DISABLE=1 with NCCL_NET=IB: NCCL fails with 'Failed to initialize any NET plugin'",
                "unset one of them",
            )
        )
    if is_set_to_one(env, "NCCL_P2P_DISABLE") and "NCCL_P2P_LEVEL" in env:
        issues.append(
            warn("NCCL_P2P_DISABLE=1 and NCCL_P2P_LEVEL are both set; NCCL_P2P_DISABLE wins", "unset one of them")
        )
    for new, old in (
        ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"),
        ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
        ("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"),
    ):
        if new in env and old in env and env[new] != env[old]:
            issues.append(warn(f"{new}={env[new]} and {old}={env[old]} disagree; PyTorch uses {new}", f"unset {old}"))
    return issues


def _nccl_values(ctx: Context) -> list[Issue]:
    env = ctx.env
    issues: list[Issue] = []
    for name in ("NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"):
        value = env.get(name)
        if value is not None and value not in LEVELS and not nccl_int(value).exact:
            issues.append(
                warn(
                    f"{name}={value} is silently ignored (exact, case-sensitive: {', '.join(sorted(LEVELS))})",
                    f"use e.g. {name}={value.upper() if value.upper() in LEVELS else 'PXB'}",
                )
            )
    debug = env.get("NCCL_DEBUG")
    if debug is not None and debug.upper() not in DEBUG:
        issues.append(warn(f"NCCL_DEBUG={debug} is not a level NCCL knows", "use NCCL_DEBUG=WARN (or INFO to debug)"))
    subsys = env.get("NCCL_DEBUG_SUBSYS")
    if subsys:
        bad = [t for t in subsys.lstrip("^").split(",") if t and t.upper() not in SUBSYS]
        if bad:
            issues.append(
                warn(
                    f"NCCL_DEBUG_SUBSYS has unknown subsystems: {', '.join(bad)}",
                    f"use names from {', '.join(sorted(SUBSYS))}",
                )
            )
    issues += _algo_proto(ctx) + _ranges(env)
    for name in ("NCCL_IB_ADDR_FAMILY",):
        value = env.get(name)
        if value is not None and value not in ("AF_INET", "AF_INET6"):
            issues.append(warn(f"{name}={value} is silently ignored (only AF_INET or AF_INET6)", f"unset {name}"))
    addr_range = env.get("NCCL_IB_ADDR_RANGE")
    if addr_range is not None and "/" not in addr_range:
        issues.append(
            warn(
                f"NCCL_IB_ADDR_RANGE={addr_range} has no '/prefix' and is ignored", "write it as CIDR, e.g. 10.0.0.0/16"
            )
        )
    return issues


def _bad_tokens(ctx: Context) -> list[tuple[str, list[str]]]:
    """NCCL_ALGO / NCCL_PROTO tokens NCCL does not know, in the user's spelling."""
    found = []
    for name, allowed in (("NCCL_ALGO", ALGOS), ("NCCL_PROTO", PROTOS)):
        value = ctx.env.get(name)
        if not value:
            continue
        # "allreduce:ring,tree;broadcast:^ll128": drop the "func:" prefix of each ';' part, then split on ','.
        lists = [part.split(":", 1)[-1] for part in value.split(";")]
        words = [w.strip().lstrip("^") for item in lists for w in item.split(",") if w.strip()]
        lower = {a.lower() for a in allowed}
        bad = list(dict.fromkeys(w for w in words if w.lower() not in lower))
        if bad:
            found.append((name, bad))
    return found


def _algo_proto(ctx: Context) -> list[Issue]:
    issues = []
    strict = ctx.nccl is None or ctx.nccl >= (2, 24, 0)
    for name, bad in _bad_tokens(ctx):
        allowed = ALGOS if name == "NCCL_ALGO" else PROTOS
        guesses = [_closest(w, allowed) for w in bad]
        hints = [f"did you mean {g}?" for g in guesses if g]
        text = f"{name}={ctx.env[name]} has unknown token(s): {', '.join(bad)}" + (
            f" ({'; '.join(hints)})" if hints else ""
        )
        fix = f"use {', '.join(allowed)} (case does not matter), or unset {name}"
        issues.append(fail(text + "; NCCL >= 2.24 fails init", fix) if strict else warn(text, fix))
    return issues


def _closest(word: str, names: tuple[str, ...]) -> str | None:
    by_lower = {n.lower(): n for n in names}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def _ranges(env: Mapping[str, str]) -> list[Issue]:
    """Values NCCL reads as numbers but outside what it supports (garbage is ``_nccl_params``' to say)."""
    issues = []
    for name, (low, high) in RANGES.items():
        value = env.get(name)
        if not value:
            continue
        parsed = nccl_int(value)
        if parsed.digits and not parsed.overflow and not low <= parsed.value <= high:
            issues.append(warn(f"{name}={value} is outside {low}..{high}", f"unset {name} or use {low}..{high}"))
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


def _nccl_params(env: Mapping[str, str], table: KnownVars) -> list[Issue]:
    """Every integer NCCL setting NCCL would read as something else than what is written (strtoll's rules)."""
    issues = []
    for name, value in sorted(env.items()):
        known = table.lookup(name)
        readers = set(known.how_read.split(",")) if known else set()
        if not value or "NCCL_PARAM" not in readers or "getenv" in readers:  # getenv: NCCL also reads it as text
            continue
        parsed = nccl_int(value)
        if parsed.exact:
            continue
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
        issues.append(fail(text, fix) if meant_yes or name == "NCCL_IB_GID_INDEX" else warn(text, fix))
    return issues


def _what_nccl_does(name: str, value: int) -> str:
    if name.endswith("_DISABLE"):
        what = name[len("NCCL_") : -len("_DISABLE")].replace("_", " ")
        return f": {what} stays ON" if value == 0 else f": {what} is disabled" if value == 1 else ""
    if name.endswith("_ENABLE"):
        return ": it is off" if value == 0 else ""
    if name == "NCCL_IB_GID_INDEX":
        return f": GID index {value}" + (" (link-local on RoCE, not routable between nodes)" if value == 0 else "")
    return ""


def _torch_values(env: Mapping[str, str], table: KnownVars) -> list[Issue]:
    issues = []
    for name, value in env.items():
        known = table.lookup(name)
        if known is None or not name.startswith(("TORCH_", "TORCHELASTIC_")):
            continue
        kind = known.kind
        if (kind == "bool" and value.strip().lower() not in BOOLS) or (kind == "int" and parse_int(value) is None):
            issues.append(
                fail(
                    f"{name}={value} is not a valid {kind}: PyTorch raises 'Invalid value for environment"
                    f" variable: {name}' when the process group is created",
                    f"use {'1 or 0' if kind == 'bool' else 'an integer'}",
                )
            )
    debug = env.get("TORCH_DISTRIBUTED_DEBUG")
    if debug is not None and debug not in ("OFF", "INFO", "DETAIL"):
        issues.append(
            fail(
                f"TORCH_DISTRIBUTED_DEBUG={debug}: PyTorch raises 'must be OFF, INFO, or DETAIL'",
                "use OFF, INFO or DETAIL",
            )
        )
    return issues
