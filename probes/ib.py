"""InfiniBand / RoCE HCAs from sysfs: ports, GID tables, netdevs, uverbs devices, GPUDirect modules.

Run alone on a node: ``python3 probes/ib.py [--root DIR]`` prints JSON. Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/ib.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"

# Paths whose presence makes NCCL treat GPUDirect RDMA via peer memory as available
# (NVIDIA/nccl src/transport/net_ib/gdr.cc).
PEERMEM_PATHS = (
    "sys/kernel/mm/memory_peers/nv_mem/version",
    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "sys/module/nvidia_peermem/version",
)


@dataclass(frozen=True)
class Gid:
    """One populated slot of a port's GID table."""

    index: int
    gid: str
    type: str | None
    ndev: str | None


@dataclass(frozen=True)
class Port:
    """One HCA port as sysfs shows it."""

    hca: str
    port: int
    state: str | None
    phys_state: str | None
    link_layer: str | None
    rate: str | None
    lid: str | None
    sm_lid: str | None
    netdev: str | None
    gid_tbl_len: int
    gids: tuple[Gid, ...]

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.port}"


@dataclass(frozen=True)
class Hca:
    """One RDMA device (``/sys/class/infiniband/<name>``)."""

    name: str
    node_type: str | None
    fw_ver: str | None
    board_id: str | None
    pci_bdf: str | None
    uverbs: str | None
    uverbs_dev_present: bool
    uverbs_dev_accessible: bool
    ports: tuple[Port, ...]


@dataclass(frozen=True)
class IbFacts:
    """Everything the IB/RoCE checks need from one node."""

    root: str
    rdma_stack: bool
    hcas: tuple[Hca, ...]
    dev_infiniband: bool
    libibverbs: str | None
    peermem: tuple[str, ...]
    peermem_modules: tuple[str, ...]


def collect(root: str = "/") -> IbFacts:
    """Read the RDMA view of the node under ``root``."""
    ib_dir = _sysfs.path(root, "sys/class/infiniband")
    uverbs = _uverbs_by_hca(root)
    hcas = tuple(_hca(root, name, uverbs.get(name)) for name in _sysfs.listdir(ib_dir))
    peermem = tuple(p for p in PEERMEM_PATHS if os.path.exists(_sysfs.path(root, p)))
    return IbFacts(
        root=root,
        rdma_stack=os.path.isdir(ib_dir),
        hcas=hcas,
        dev_infiniband=os.path.isdir(_sysfs.path(root, "dev/infiniband")),
        libibverbs=_libibverbs() if hcas and root == "/" else None,
        peermem=peermem,
        peermem_modules=_loaded_peermem_modules(root),
    )


def _uverbs_by_hca(root: str) -> dict[str, str]:
    verbs_dir = _sysfs.path(root, "sys/class/infiniband_verbs")
    found: dict[str, str] = {}
    for entry in _sysfs.listdir(verbs_dir):
        ibdev = _sysfs.read(os.path.join(verbs_dir, entry, "ibdev"))
        if entry.startswith("uverbs") and ibdev:
            found[ibdev] = entry
    return found


def _hca(root: str, name: str, uverbs: str | None) -> Hca:
    base = _sysfs.path(root, "sys/class/infiniband", name)
    dev_path = _sysfs.path(root, "dev/infiniband", uverbs) if uverbs else ""
    ports_dir = os.path.join(base, "ports")
    return Hca(
        name=name,
        node_type=_sysfs.read(os.path.join(base, "node_type")),
        fw_ver=_sysfs.read(os.path.join(base, "fw_ver")),
        board_id=_sysfs.read(os.path.join(base, "board_id")),
        pci_bdf=_pci_bdf(os.path.join(base, "device")),
        uverbs=uverbs,
        uverbs_dev_present=bool(dev_path) and os.path.exists(dev_path),
        uverbs_dev_accessible=bool(dev_path) and os.access(dev_path, os.R_OK | os.W_OK),
        ports=tuple(_port(root, name, base, int(p)) for p in _sysfs.listdir(ports_dir) if p.isdigit()),
    )


def _pci_bdf(device_dir: str) -> str | None:
    uevent = _sysfs.read(os.path.join(device_dir, "uevent")) or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1]
    if os.path.islink(device_dir):
        return os.path.basename(os.path.realpath(device_dir))
    return None


def _port(root: str, hca: str, base: str, number: int) -> Port:
    pdir = os.path.join(base, "ports", str(number))
    link_layer = _sysfs.read(os.path.join(pdir, "link_layer"))
    gids = _gids(pdir)
    return Port(
        hca=hca,
        port=number,
        state=_sysfs.read(os.path.join(pdir, "state")),
        phys_state=_sysfs.read(os.path.join(pdir, "phys_state")),
        link_layer=link_layer,
        rate=_sysfs.read(os.path.join(pdir, "rate")),
        lid=_sysfs.read(os.path.join(pdir, "lid")),
        sm_lid=_sysfs.read(os.path.join(pdir, "sm_lid")),
        netdev=_netdev(root, base, number, gids),
        gid_tbl_len=len(_sysfs.listdir(os.path.join(pdir, "gids"))),
        gids=gids,
    )


def _gids(pdir: str) -> tuple[Gid, ...]:
    rows = []
    for entry in _sysfs.listdir(os.path.join(pdir, "gids")):
        if not entry.isdigit():
            continue
        value = _sysfs.read(os.path.join(pdir, "gids", entry))
        if value is None:
            continue
        rows.append(
            Gid(
                index=int(entry),
                gid=value.lower(),
                type=_sysfs.read(os.path.join(pdir, "gid_attrs/types", entry)),
                ndev=_sysfs.read(os.path.join(pdir, "gid_attrs/ndevs", entry)),
            )
        )
    return tuple(rows)


def _netdev(root: str, base: str, port: int, gids: tuple[Gid, ...]) -> str | None:
    """The netdev of a port, in the order ibdev2netdev / show_gids resolve it."""
    for gid in gids:
        if gid.ndev and gid.gid != ZERO_GID:
            return gid.ndev
    netdevs = _sysfs.listdir(os.path.join(base, "device/net"))
    if len(netdevs) == 1:
        return netdevs[0]
    for netdev in netdevs:
        ndir = _sysfs.path(root, "sys/class/net", netdev)
        dev_id = _sysfs.read_int(os.path.join(ndir, "dev_id")) or 0
        dev_port = _sysfs.read_int(os.path.join(ndir, "dev_port")) or 0
        if max(dev_id, dev_port) + 1 == port:
            return netdev
    return None


def _libibverbs() -> str:
    """Which libibverbs NCCL's dlopen order finds, or "" when none loads."""
    for name in ("libibverbs.so", "libibverbs.so.1"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return ""


def _loaded_peermem_modules(root: str) -> tuple[str, ...]:
    text = _sysfs.read(_sysfs.path(root, "proc/modules")) or ""
    names = {line.split(" ", 1)[0] for line in text.splitlines() if line}
    return tuple(sorted(names & {"nvidia_peermem", "nv_peer_mem"}))


def main(argv: list[str] | None = None) -> int:
    return _sysfs.print_json(collect(_sysfs.root_from_argv(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
