"""Compare what every rank runs with: differing versions or NCCL settings are a classic cause of hangs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter

from ncclcheck.analysis.nccl_rules import Version, ib_ports, nccl_gid_index, socket_interfaces
from ncclcheck.model.findings import Finding, Severity
from ncclcheck.model.ids import smoke as smoke_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.smoke import Fingerprint
from ncclcheck.probes.host import Hostname
from ncclcheck.probes.ib import Hca
from ncclcheck.probes.net import IfAddr

ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_DEBUG", "TORCH_GLOO_")
PER_NODE_OK = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_HOSTID")
NOT_COMPARED = ("NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG")


def settings(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The environment variables that change what NCCL, gloo or c10d do, sorted."""
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIXES)))


def socket_interface(
    backend: str, addrs: Sequence[IfAddr], host: Hostname, env: Mapping[str, str], nccl: Version | None
) -> str | None:
    """The interface(s) the backend's sockets use on this node, as ``name(addr)``."""
    if backend == "nccl":
        pick = socket_interfaces(addrs, env, nccl).interfaces
        return ",".join(f"{a.name}({a.addr})" for a in pick) or None
    named = env.get("GLOO_SOCKET_IFNAME")
    if named and len(named) > 1:
        return ",".join(f"{n}({_addr_of(addrs, n) or '?'})" for n in named.split(","))
    bound = next((a.addr for a in host.addrs if a.bindable), None)
    if bound is None:
        return None
    name = next((a.name for a in addrs if a.addr == bound), None)
    return f"{name or host.hostname}({bound})"


def _addr_of(addrs: Sequence[IfAddr], name: str) -> str | None:
    return next((a.addr for a in addrs if a.name == name), None)


def ib_port_names(hcas: Sequence[Hca], env: Mapping[str, str], nccl: Version | None) -> tuple[str, ...]:
    """``mlx5_0:1/RoCE gid 3`` for each port NCCL would open."""
    names = []
    for port in ib_ports(hcas, env.get("NCCL_IB_HCA")):
        layer = "RoCE" if port.link_layer == "Ethernet" else "IB"
        gid = f" gid {nccl_gid_index(port, env, nccl)}" if layer == "RoCE" else ""
        names.append(f"{port.hca}:{port.port}/{layer}{gid}")
    return tuple(names)


def differences(prints: Sequence[Fingerprint]) -> tuple[Finding, ...]:
    """Findings for every field on which the ranks disagree."""
    if len(prints) < 2:
        return ()
    findings = []
    checked: tuple[tuple[str, str, Severity, str], ...] = (
        (smoke_ids.FINGERPRINT_TORCH, "torch", "warning", "install the same torch build on every node"),
        (
            smoke_ids.FINGERPRINT_NCCL,
            "nccl",
            "warning",
            "use one NCCL everywhere (same torch wheel, or the same LD_PRELOAD/LD_LIBRARY_PATH libnccl)",
        ),
        (smoke_ids.FINGERPRINT_BACKEND, "backend", "error", "run every rank with the same backend"),
    )
    for fid, field, severity, fix in checked:
        groups = _groups(prints, attrgetter(field))
        if len(groups) > 1:
            findings.append(_finding(fid, severity, field, groups, fix))
    findings.extend(_env_differences(prints))
    findings.extend(_interface_differences(prints))
    return tuple(findings)


def _env_differences(prints: Sequence[Fingerprint]) -> list[Finding]:
    names = sorted({k for p in prints for k, _ in p.env} - set(NOT_COMPARED))
    findings = []
    for name in names:
        groups = _groups(prints, _env_value(name))
        if len(groups) < 2:
            continue
        per_node = name in PER_NODE_OK and _same_within_hosts(prints, name)
        findings.append(
            _finding(
                smoke_ids.FINGERPRINT_ENV,
                "info" if per_node else "warning",
                name,
                groups,
                "fine when the nodes name their NICs differently"
                if per_node
                else f"export the same {name} on every rank (or unset it everywhere)",
            )
        )
    return findings


def _env_value(name: str) -> Callable[[Fingerprint], str | None]:
    return lambda p: dict(p.env).get(name)


def _interface_differences(prints: Sequence[Fingerprint]) -> list[Finding]:
    hosts: dict[str, set[str | None]] = defaultdict(set)
    for p in prints:
        hosts[p.host].add(p.socket_ifname)
    split = [h for h, picks in hosts.items() if len(picks) > 1]
    if not split:
        return []
    groups = _groups([p for p in prints if p.host in split], lambda p: p.socket_ifname)
    return [
        _finding(
            smoke_ids.FINGERPRINT_INTERFACE,
            "warning",
            "socket interface",
            groups,
            "ranks on one host should use the same interface; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME once for the job",
        )
    ]


def _same_within_hosts(prints: Sequence[Fingerprint], name: str) -> bool:
    hosts: dict[str, set[str | None]] = defaultdict(set)
    for p in prints:
        hosts[p.host].add(dict(p.env).get(name))
    return all(len(values) == 1 for values in hosts.values())


def _groups(prints: Sequence[Fingerprint], key: Callable[[Fingerprint], str | None]) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = defaultdict(list)
    for p in prints:
        groups[key(p)].append(p.rank)
    return dict(groups)


def _finding(fid: str, severity: Severity, what: str, groups: Mapping[str | None, list[int]], fix: str) -> Finding:
    parts = [f"{'unset' if value is None else value} on rank(s) {span(ranks)}" for value, ranks in groups.items()]
    # The reference is the largest group, on a tie the one holding the lowest rank; the others are named.
    reference = max(groups.values(), key=lambda ranks: (len(ranks), -min(ranks)))
    odd = sorted(r for ranks in groups.values() if ranks is not reference for r in ranks)
    return Finding(fid, severity, f"{what} differs between ranks: " + "; ".join(parts), fix, tuple(odd))
