"""Save what ``ncclcheck env`` reads on this node into a directory, for ``ncclcheck env --root DIR`` elsewhere.

Run on the node (stdlib only, no ncclcheck needed there): ``python3 probes/save_tree.py DIR``. It copies
the sysfs, /proc and /etc files the probes read (GPUs, HCAs and GID tables, interfaces, IOMMU, modules,
limits, mounts, hosts, nccl.conf), writes ``ifaddrs.json`` (getifaddrs) and ``ncclcheck-tree.json``
(this node's name, its NCCL/torch/gloo/launcher environment variables, the versions probe's
facts, torch import included, and /dev/shm's size). Nothing is changed on the node; DIR must not exist or be empty.
Then ``tar czf node.tgz -C DIR .`` and, anywhere: ``ncclcheck env --root DIR``.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import sys
import time
from dataclasses import asdict
from typing import Any

try:
    from . import _sysfs, envvars, host, net, versions
except ImportError:  # run as a script: python3 probes/save_tree.py
    import _sysfs  # type: ignore[no-redef,import-not-found]
    import envvars  # type: ignore[no-redef,import-not-found]
    import host  # type: ignore[no-redef,import-not-found]
    import net  # type: ignore[no-redef,import-not-found]
    import versions  # type: ignore[no-redef,import-not-found]

TREE_FILE = "ncclcheck-tree.json"
TREE_SCHEMA = "ncclcheck.tree/1"
MAX_BYTES = 1 << 20
# Globs under / whose files the probes read (gpu.py, ib.py, net.py, host.py, envvars.py).
FILES = (
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus/*/information",
    "sys/module/nvidia/version",
    "sys/module/nvidia_peermem/version",
    "sys/kernel/mm/memory_peers/*/version",
    "sys/bus/pci/devices/*/vendor",
    "sys/bus/pci/devices/*/class",
    "sys/bus/pci/devices/*/device",
    "sys/bus/pci/devices/*/numa_node",
    "sys/bus/pci/devices/*/iommu_group/type",
    "sys/class/infiniband/*/board_id",
    "sys/class/infiniband/*/fw_ver",
    "sys/class/infiniband/*/node_type",
    "sys/class/infiniband/*/ports/*/*",
    "sys/class/infiniband/*/ports/*/gids/*",
    "sys/class/infiniband/*/ports/*/gid_attrs/types/*",
    "sys/class/infiniband/*/ports/*/gid_attrs/ndevs/*",
    "sys/class/infiniband_verbs/*/ibdev",
    "sys/class/net/*/operstate",
    "sys/class/net/*/mtu",
    "sys/class/net/*/type",
    "sys/class/net/*/carrier",
    "sys/class/net/*/dev_id",
    "sys/class/net/*/dev_port",
    "proc/modules",
    "proc/self/status",
    "proc/self/limits",
    "proc/self/mountinfo",
    "proc/1/cgroup",
    "proc/sys/kernel/yama/ptrace_scope",
    "proc/sys/kernel/random/boot_id",
    "etc/hosts",
    "etc/nccl.conf",
    ".dockerenv",
    "run/.containerenv",
)
# Directories whose entries' names are what a probe looks at (device nodes, an HCA's netdevs).
NAMES = ("dev/infiniband/*", "sys/class/infiniband/*/device/net/*")


def save(out: str, root: str = "/") -> list[str]:
    """Write the tree under ``out``; returns what could not be read (permissions, vanished files)."""
    skipped: list[str] = []
    for pattern in FILES:
        for source in glob.glob(os.path.join(root, pattern)):
            if os.path.isfile(source) and not _copy(source, os.path.join(out, os.path.relpath(source, root))):
                skipped.append(source)
    for pattern in NAMES:
        for source in glob.glob(os.path.join(root, pattern)):
            target = os.path.join(out, os.path.relpath(source, root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
    with open(os.path.join(out, "ifaddrs.json"), "w", encoding="utf-8") as handle:
        json.dump([asdict(a) for a in net.collect().ifaddrs], handle, indent=1)
    environ = {k: v for k, v in os.environ.items() if envvars.relevant(k)}
    tree: dict[str, Any] = {
        "schema": TREE_SCHEMA,
        "host": socket.gethostname(),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environ": environ,
        "versions": asdict(versions.collect(try_import=True)),
        "shm": asdict(host.collect().shm),  # statvfs of the node's /dev/shm: a copied directory has none
    }
    with open(os.path.join(out, TREE_FILE), "w", encoding="utf-8") as handle:
        json.dump(tree, handle, indent=1)
    return skipped


def load(root: str) -> dict[str, Any] | None:
    """``root``'s ncclcheck-tree.json (None when the tree has none); SavedTreeError when it is malformed."""
    path = os.path.join(root, TREE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            tree = json.load(handle)
        if not isinstance(tree, dict) or tree.get("schema") != TREE_SCHEMA:
            raise ValueError(f'no "schema": "{TREE_SCHEMA}"')
        if not isinstance(tree.get("environ"), dict) or not isinstance(tree.get("versions"), dict):
            raise ValueError("no environ or versions object")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _sysfs.SavedTreeError(f"{path} is not what probes/save_tree.py writes ({exc})") from None
    return tree


def _copy(source: str, target: str) -> bool:
    try:
        with open(source, "rb") as handle:
            data = handle.read(MAX_BYTES)
    except OSError:
        return False  # sysfs answers EINVAL for empty GID slots: an absent file is what the probes expect
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(data)
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python3 probes/save_tree.py DIR   (DIR: a new or empty directory)", file=sys.stderr)
        return 2
    out = args[0]
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        print(f"save_tree: {out} exists and is not an empty directory; give a new one", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    skipped = save(out)
    print(f"saved {out} ({len(skipped)} unreadable file(s) left out); analyse it with: ncclcheck env --root {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
