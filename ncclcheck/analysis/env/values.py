"""Values of NCCL_/TORCH_ variables: leftovers that cost speed, contradictions, and values NCCL ignores."""

from __future__ import annotations

from collections.abc import Mapping

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.known_vars import KnownVars
from ncclcheck.analysis.env.typed_values import BOOLS, closest, typed_issues
from ncclcheck.analysis.env.verdict import Issue, fail, warn
from ncclcheck.analysis.nccl_rules import nccl_int
from ncclcheck.probes._sysfs import parse_int

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
    issues = _leftovers(env, ctx, table) + _contradictions(env) + _nccl_values(ctx, table) + typed_issues(env, table)
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


def _leftovers(env: Mapping[str, str], ctx: Context, table: KnownVars) -> list[Issue]:
    issues = []
    invalid = {name for name, _ in _bad_tokens(ctx, table)}  # said once, by the value check
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


def _nccl_values(ctx: Context, table: KnownVars) -> list[Issue]:
    env = ctx.env
    issues: list[Issue] = []
    subsys = env.get("NCCL_DEBUG_SUBSYS")
    if subsys:
        names = _allowed(table, "NCCL_DEBUG_SUBSYS")
        bad = [t for t in subsys.lstrip("^").split(",") if t and t.upper() not in names]
        if bad:
            issues.append(
                warn(
                    f"NCCL_DEBUG_SUBSYS has unknown subsystems: {', '.join(bad)}",
                    f"use names from {', '.join(sorted(names))}",
                )
            )
    issues += _algo_proto(ctx, table)
    addr_range = env.get("NCCL_IB_ADDR_RANGE")
    if addr_range is not None and "/" not in addr_range:
        issues.append(
            warn(
                f"NCCL_IB_ADDR_RANGE={addr_range} has no '/prefix' and is ignored", "write it as CIDR, e.g. 10.0.0.0/16"
            )
        )
    return issues


def _allowed(table: KnownVars, name: str) -> tuple[str, ...]:
    known = table.lookup(name)
    return known.allowed if known else ()


def _bad_tokens(ctx: Context, table: KnownVars) -> list[tuple[str, list[str]]]:
    """NCCL_ALGO / NCCL_PROTO tokens NCCL does not know, in the user's spelling."""
    found = []
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        allowed = _allowed(table, name)
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


def _algo_proto(ctx: Context, table: KnownVars) -> list[Issue]:
    issues = []
    strict = ctx.nccl is None or ctx.nccl >= (2, 24, 0)
    for name, bad in _bad_tokens(ctx, table):
        allowed = _allowed(table, name)
        guesses = [closest(w, allowed) for w in bad]
        hints = [f"did you mean {g}?" for g in guesses if g]
        text = f"{name}={ctx.env[name]} has unknown token(s): {', '.join(bad)}" + (
            f" ({'; '.join(hints)})" if hints else ""
        )
        fix = f"use {', '.join(allowed)} (case does not matter), or unset {name}"
        issues.append(fail(text + "; NCCL >= 2.24 fails init", fix) if strict else warn(text, fix))
    return issues


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
