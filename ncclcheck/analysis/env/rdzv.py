"""``rdzv``: the rendezvous endpoint (MASTER_ADDR:MASTER_PORT) and the launcher's rank variables."""

from __future__ import annotations

from ncclcheck.analysis.env.context import Context, is_loopback
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes._sysfs import parse_int
from ncclcheck.probes.rdzv import RdzvFacts

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def endpoint(snapshot: NodeSnapshot, env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """MASTER_ADDR and MASTER_PORT: the command line wins over the environment."""
    opts = snapshot.options
    values = env or {}
    return opts.master_addr or values.get("MASTER_ADDR"), opts.master_port or values.get("MASTER_PORT")


def check_rdzv(snapshot: NodeSnapshot, ctx: Context) -> Check:
    addr, port_text = endpoint(snapshot, dict(ctx.env))
    worker = "RANK" in ctx.env or "LOCAL_RANK" in ctx.env
    issues = _rank_issues(ctx)
    if not addr or (not port_text and worker):
        missing = " and ".join(n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port_text)) if not v)
        if worker:
            issues.append(
                fail(
                    f"RANK is set but {missing} is not: env:// init raises 'environment variable"
                    f" {missing.split()[0]} expected, but not set'",
                    f"export {missing.split()[0]}=...",
                )
            )
            return conclude(env_ids.RDZV, "", issues)
        return skip(
            env_ids.RDZV,
            f"no rendezvous endpoint ({missing} unset): pass --master-addr HOST --master-port PORT to check one",
        )
    port = parse_int(port_text) if port_text else None
    if port_text and (port is None or not 0 < port < 65536):
        issues.append(fail(f"MASTER_PORT={port_text} is not a TCP port (1-65535)", "export MASTER_PORT=29500"))
    facts = snapshot.rdzv
    if facts is None:
        if issues:
            return conclude(env_ids.RDZV, "", issues)
        return skip(env_ids.RDZV, "rendezvous endpoint not probed under --root (the saved tree is not this network)")
    issues += _endpoint_issues(facts, ctx)
    where = "this node (hosts the store)" if facts.local else "a remote node" if facts.resolved else "not resolved"
    shown = f"{addr}:{port}" if port is not None and not issues else addr
    summary = f"{shown} resolves to {', '.join(facts.resolved) or 'nothing'}, {where}"
    if facts.connect == "ok":
        summary += f"; something listens on port {facts.connect_port} (a TCP connect succeeded)"
    if not port_text:
        tried = "tried" if facts.connect_port else "the port was not tried"
        summary += f"; MASTER_PORT unset (torchrun's default is 29500; {tried})"
    details = [f"resolved: {', '.join(facts.resolved)}", f"route from {facts.route_source}"] if facts.resolved else []
    return conclude(env_ids.RDZV, summary, issues, details)


def _endpoint_issues(facts: RdzvFacts, ctx: Context) -> list[Issue]:
    target = f"{facts.addr}:{facts.port}"
    if not facts.resolved:
        return [
            fail(
                f"MASTER_ADDR={facts.addr} does not resolve on this node ({facts.resolve_error})",
                "use an IP address, or fix DNS / /etc/hosts on every node",
            )
        ]
    issues: list[Issue] = []
    if all(is_loopback(a) for a in facts.resolved) and ctx.multi_node:
        issues.append(
            fail(
                f"MASTER_ADDR={facts.addr} is loopback but the job spans several nodes: other nodes"
                " would connect to themselves",
                "set MASTER_ADDR to the routable IP of the rank-0 node",
            )
        )
    if len({":" in a for a in facts.resolved}) > 1:
        issues.append(
            warn(
                f"MASTER_ADDR={facts.addr} resolves to IPv4 and IPv6 addresses; clients try them in order",
                "use one IP address as MASTER_ADDR",
            )
        )
    issues += _local_issues(facts, ctx, target) if facts.local else _remote_issues(facts, ctx, target)
    return issues


def _local_issues(facts: RdzvFacts, ctx: Context, target: str) -> list[Issue]:
    issues: list[Issue] = []
    if _node_rank(ctx) not in (None, 0):
        issues.append(
            warn(
                f"MASTER_ADDR {facts.addr} is this node, but this node is not rank 0",
                "set MASTER_ADDR to the rank-0 node on every node",
            )
        )
    agent_store = ctx.env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if facts.bind == "EADDRINUSE" and not agent_store:
        issues.append(
            fail(
                f"port {facts.port} is already in use on this node: the TCPStore cannot listen"
                " ('EADDRINUSE'; a stale job or another torchrun?)",
                f"pick a free MASTER_PORT, or find the owner: ss -ltnp 'sport = :{facts.port}'",
            )
        )
    elif facts.bind not in (None, "ok", "EADDRINUSE"):
        issues.append(
            fail(f"cannot bind port {facts.port} here ({facts.bind})", "use a port >= 1024 that is free, e.g. 29500")
        )
    return issues


def _remote_issues(facts: RdzvFacts, ctx: Context, _target: str) -> list[Issue]:
    if _node_rank(ctx) == 0:
        return [
            warn(
                f"this node is rank 0 but MASTER_ADDR {facts.addr} is not one of its addresses",
                "set MASTER_ADDR to this node's IP",
            )
        ]
    if facts.connect in ("ok", None):  # None: not tried (no usable port)
        return []
    port = facts.connect_port or facts.port
    target = f"{facts.addr}:{port}"
    guessed = " (torchrun's default; MASTER_PORT unset)" if facts.port is None else ""
    if facts.connect == "ECONNREFUSED":
        return [
            warn(
                f"{target}{guessed}: connection refused, the host answers but nothing listens on the port"
                " (rank 0 not started, a REJECT rule, or another port)",
                "start rank 0 first; if it runs, check MASTER_PORT and its firewall for the port",
            )
        ]
    if facts.connect == "timeout":
        return [
            fail(
                f"{target}{guessed}: timed out, no answer (packets dropped: firewall, security group or wrong network)",
                f"allow TCP {port} (and the ephemeral port range) between the nodes; run `ncclcheck env`"
                " on the master node",
            )
        ]
    if facts.connect in ("ENETUNREACH", "EHOSTUNREACH"):
        return [
            fail(
                f"{target}: no route to the host from this node ({facts.connect}, route from"
                f" {facts.route_source or 'no local address'})",
                f"check routing between the nodes: ip route get {facts.addr}",
            )
        ]
    return [
        fail(f"cannot reach {target}: {facts.connect}", f"check routing between the nodes: ip route get {facts.addr}")
    ]


def _node_rank(ctx: Context) -> int | None:
    for name in ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"):
        value = parse_int(ctx.env.get(name))
        if value is not None:
            return value
    return None


def _rank_issues(ctx: Context) -> list[Issue]:
    values = {n: ctx.env[n] for n in RANK_VARS if n in ctx.env}
    numbers = {n: parse_int(v) for n, v in values.items()}
    bad = [f"{n}={values[n]}" for n, v in numbers.items() if v is None or v < 0]
    if bad:
        return [fail(f"not a non-negative integer: {', '.join(bad)}", "fix the launcher's rank variables")]
    issues: list[Issue] = []
    for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if rank in numbers and size in numbers and (numbers[rank] or 0) >= (numbers[size] or 0):
            issues.append(
                fail(f"{rank}={values[rank]} is not below {size}={values[size]}", "fix the launcher's rank variables")
            )
    world, local = numbers.get("WORLD_SIZE"), numbers.get("LOCAL_WORLD_SIZE")
    if world and local and world % local:
        issues.append(
            warn(
                f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local} (uneven nodes)",
                "run the same number of ranks on every node",
            )
        )
    libuv = ctx.env.get("USE_LIBUV")
    if libuv is not None and libuv not in ("0", "1"):
        issues.append(warn(f"USE_LIBUV={libuv} is neither 0 nor 1", "unset USE_LIBUV"))
    return issues
