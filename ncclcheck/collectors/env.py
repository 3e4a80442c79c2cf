"""Run every probe of ``ncclcheck env`` on this node and freeze the results into a NodeSnapshot."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

from ncclcheck.collectors.gpu import look as look_at_gpus
from ncclcheck.model.env import EnvOptions, NodeSnapshot
from ncclcheck.probes import envvars, gpu, host, ib, net, rdzv, save_tree, slurm, versions
from ncclcheck.probes._sysfs import SavedTreeError, parse_int

CONNECT_TIMEOUT_S = 2.0


NOT_SAVED_VERSIONS = versions.VersionFacts("?", "?", None, "not in the saved tree", None, (), None, None)


def collect_snapshot(
    options: EnvOptions, environ: Mapping[str, str] | None = None, assumed: Mapping[str, str] | None = None
) -> NodeSnapshot:
    """Collect the facts of this node, or of the tree saved under ``options.root`` (never a mix of the two).

    ``assumed``: variables the user asked to judge as set (``env --set``), over the environment.
    Raises SavedTreeError when a file of the saved tree is malformed.
    """
    root = options.root
    if root != "/":
        return _saved_snapshot(options, dict(assumed or {}))
    judged = {**(os.environ if environ is None else environ), **(assumed or {})}
    env_facts = envvars.collect(root, judged)
    net_facts = net.collect(root)
    effective: dict[str, str] = {}
    for var in env_facts.effective:
        effective.setdefault(var.name, var.value)
    gpu_facts = gpu.collect(root)
    return NodeSnapshot(
        options=options,
        versions=versions.collect(root, try_import=options.try_import, environ=judged),
        gpu=gpu_facts,
        ib=ib.collect(root),
        net=net_facts,
        host=host.collect(root),
        env=env_facts,
        rdzv=_rdzv(options, effective, net_facts),
        nvml=look_at_gpus() if gpu_facts.gpus else None,
        slurm=slurm.collect(judged),
    )


def _saved_snapshot(options: EnvOptions, assumed: dict[str, str]) -> NodeSnapshot:
    root = options.root
    tree = save_tree.load(root)
    try:
        saved_versions = versions.from_json(tree["versions"]) if tree else NOT_SAVED_VERSIONS
    except (KeyError, TypeError) as exc:
        raise SavedTreeError(
            f"{root}/{save_tree.TREE_FILE}: its versions are not what save_tree writes ({exc})"
        ) from None
    net_facts = net.collect(root)
    host_facts = host.collect(root)
    if tree and isinstance(tree.get("shm"), dict):
        try:
            segments = tuple(host.ShmSegment(**s) for s in tree["shm"].get("nccl_segments", ()))
            host_facts = dataclasses.replace(host_facts, shm=host.Shm(**{**tree["shm"], "nccl_segments": segments}))
        except TypeError as exc:
            raise SavedTreeError(
                f"{root}/{save_tree.TREE_FILE}: its shm is not what save_tree writes ({exc})"
            ) from None
    saved_environ = {**(tree["environ"] if tree else {}), **assumed}
    missing = (
        ("versions",) * (tree is None)
        + ("environment",) * (tree is None and not assumed)
        + (("interfaces",) if net_facts.source == net.NOT_SAVED else ())
    )
    return NodeSnapshot(
        options=options,
        versions=saved_versions,
        gpu=gpu.collect(root),
        ib=ib.collect(root),
        net=net_facts,
        host=host_facts,
        env=envvars.collect(root, saved_environ),
        rdzv=None,
        not_saved=missing,
        slurm=slurm.saved(saved_environ),
    )


def _rdzv(options: EnvOptions, env: Mapping[str, str], net_facts: net.NetFacts) -> rdzv.RdzvFacts | None:
    addr = options.master_addr or env.get("MASTER_ADDR")
    port_text = options.master_port or env.get("MASTER_PORT")
    if not addr or options.root != "/":
        return None
    port = parse_int(port_text) if port_text else None  # no port: resolved, and tried on torchrun's default
    if port_text and port is None:
        port = 0  # not a port: never tried (the analysis says so)
    local = frozenset(a.addr for a in net_facts.ifaddrs)
    return rdzv.collect(addr, port, local, timeout_s=CONNECT_TIMEOUT_S)


def host_name() -> str:
    return socket.gethostname()


def saved_host(root: str) -> str | None:
    """The name of the node a saved tree came from (None when it does not say)."""
    try:
        tree = save_tree.load(root)
    except SavedTreeError:
        return None
    host = tree.get("host") if tree else None
    return f"{host} (saved)" if isinstance(host, str) else None
