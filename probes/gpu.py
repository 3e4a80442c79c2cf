"""NVIDIA GPUs without CUDA or torch: the driver's list, PCI functions and their IOMMU groups.

Run alone on a node: ``python3 probes/gpu.py [--root DIR]`` prints JSON. Stdlib only.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/gpu.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

NVIDIA_VENDOR = 0x10DE
# PCI class 0x03xxxx = display controller (0x0300 VGA, 0x0302 3D controller: data-centre GPUs).
DISPLAY_CLASS = 0x03


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as the PCI bus and the driver show it (driver order = PCI bus order)."""

    bdf: str
    model: str | None
    numa_node: int | None
    iommu_type: str | None
    in_driver: bool


@dataclass(frozen=True)
class GpuFacts:
    """The GPUs of the node and the driver version, if a driver is loaded."""

    gpus: tuple[Gpu, ...]
    driver_loaded: bool | None
    driver_version: str | None


def collect(root: str = "/") -> GpuFacts:
    """GPUs from ``/sys/bus/pci`` and ``/proc/driver/nvidia``."""
    driver_dir = _sysfs.path(root, "proc/driver/nvidia/gpus")
    in_driver = {bdf.lower(): _model(os.path.join(driver_dir, bdf)) for bdf in _sysfs.listdir(driver_dir)}
    pci_dir = _sysfs.path(root, "sys/bus/pci/devices")
    bdfs = [bdf for bdf in _sysfs.listdir(pci_dir) if _is_nvidia_gpu(os.path.join(pci_dir, bdf))]
    for bdf in in_driver:
        if bdf not in bdfs:
            bdfs.append(bdf)
    gpus = tuple(
        Gpu(
            bdf=bdf,
            model=in_driver.get(bdf),
            numa_node=_sysfs.read_int(os.path.join(pci_dir, bdf, "numa_node")),
            iommu_type=_sysfs.read(os.path.join(pci_dir, bdf, "iommu_group/type")),
            in_driver=bdf in in_driver,
        )
        for bdf in bdfs
    )
    return GpuFacts(
        gpus=gpus,
        driver_loaded=_driver_loaded(root),
        driver_version=driver_version(root),
    )


def _driver_loaded(root: str) -> bool | None:
    """Whether the NVIDIA kernel driver is loaded; None when a copied tree has no proc/."""
    if root != "/" and not os.path.isdir(_sysfs.path(root, "proc")):
        return None
    return os.path.isdir(_sysfs.path(root, "proc/driver/nvidia"))


def _is_nvidia_gpu(device_dir: str) -> bool:
    vendor = _sysfs.read_int(os.path.join(device_dir, "vendor"))
    pci_class = _sysfs.read_int(os.path.join(device_dir, "class"))
    return vendor == NVIDIA_VENDOR and pci_class is not None and pci_class >> 16 == DISPLAY_CLASS


def _model(gpu_dir: str) -> str | None:
    for line in (_sysfs.read(os.path.join(gpu_dir, "information")) or "").splitlines():
        if line.startswith("Model:"):
            return line.split(":", 1)[1].strip()
    return None


def driver_version(root: str) -> str | None:
    """The kernel driver version: ``/sys/module/nvidia/version`` or ``/proc/driver/nvidia/version``."""
    version = _sysfs.read(_sysfs.path(root, "sys/module/nvidia/version"))
    if version:
        return version
    text = _sysfs.read(_sysfs.path(root, "proc/driver/nvidia/version")) or ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    return _sysfs.print_json(collect(_sysfs.root_from_argv(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
