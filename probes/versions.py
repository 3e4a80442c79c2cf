"""Versions without importing torch: python, torch, CUDA, the driver, and the libnccl that would load.

The NCCL version comes from ``ncclGetVersion`` of the library the dynamic loader would pick
for torch (LD_PRELOAD, torch/lib, the nvidia-nccl wheel torch's RPATH names, LD_LIBRARY_PATH,
the ld.so cache), not from the version torch was compiled against.

Run alone on a node: ``python3 probes/versions.py`` prints JSON. Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import mmap
import os
import platform
import re
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    from . import _sysfs
    from .gpu import driver_version
except ImportError:  # run as a script: python3 probes/versions.py
    import _sysfs  # type: ignore[no-redef,import-not-found]
    from gpu import driver_version  # type: ignore[no-redef,import-not-found]

NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
SHT_DYNSYM = 11


@dataclass(frozen=True)
class NcclLib:
    """A libnccl candidate, in the loader's order; the first loadable one is what torch gets."""

    path: str
    origin: str
    version_code: int | None
    error: str | None


@dataclass(frozen=True)
class Torch:
    """torch as installed, read from its files (``import torch`` takes seconds)."""

    version: str
    path: str
    cuda: str | None
    git_version: str | None
    gloo_built: bool | None
    nccl_built: bool | None

    @property
    def release(self) -> tuple[int, int] | None:
        """(major, minor) of ``version`` ("2.13.0+cu128" -> (2, 13)), None when it is not one."""
        parts = self.version.split("+")[0].split(".")[:2]
        return (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


@dataclass(frozen=True)
class VersionFacts:
    """Versions on this node; everything optional but python."""

    python: str
    platform: str
    torch: Torch | None
    torch_error: str | None
    nccl_wheel: str | None
    nccl_libs: tuple[NcclLib, ...]
    driver_version: str | None
    cuda_driver_api: int | None
    torch_import_error: str | None = None  # what ``import torch.distributed`` said when it failed here


IMPORT_TIMEOUT_S = 120.0


def from_json(data: Any) -> VersionFacts:
    """The facts ``asdict(collect())`` saved (probes/save_tree.py) read back; KeyError/TypeError when malformed."""
    torch = Torch(**data["torch"]) if data.get("torch") else None
    libs = tuple(NcclLib(**lib) for lib in data.get("nccl_libs", ()))
    return VersionFacts(**{**data, "torch": torch, "nccl_libs": libs})


def collect(root: str = "/", try_import: bool = False, environ: Mapping[str, str] | None = None) -> VersionFacts:
    """Collect the versions; ``root`` only affects where the driver version is read.

    ``try_import``: also import torch.distributed in a child Python (while the files are read), since
    files that look right can still fail to import (a missing libcudart, an ABI clash, a broken wheel, a variable
    torch rejects at import). ``environ``: the environment the child imports under (default: this one).
    """
    importing = _start_import(environ) if try_import else None
    torch, error = _torch()
    site = os.path.dirname(torch.path) if torch else None
    return VersionFacts(
        python=platform.python_version(),
        platform=platform.platform(),
        torch=torch,
        torch_error=error,
        nccl_wheel=_nccl_wheel(),
        nccl_libs=tuple(_load(path, origin) for path, origin in nccl_candidates(site, torch)),
        driver_version=driver_version(root),
        cuda_driver_api=_cuda_driver_api() if root == "/" else None,
        torch_import_error=_import_error(importing) if importing and torch else None,
    )


def _start_import(environ: Mapping[str, str] | None = None) -> subprocess.Popen[str] | None:
    try:
        return subprocess.Popen(
            [sys.executable, "-c", "import torch.distributed"],
            env=None if environ is None else dict(environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError:
        return None


def _import_error(proc: subprocess.Popen[str]) -> str | None:
    try:
        _, err = proc.communicate(timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"import torch.distributed did not finish in {IMPORT_TIMEOUT_S:.0f} s"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {proc.returncode}"
    return last[:300]


def _torch() -> tuple[Torch | None, str | None]:
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:
        return None, str(exc)
    if spec is None or not spec.origin:
        return None, "torch is not installed in this Python environment"
    path = os.path.dirname(spec.origin)
    fields = _version_py(os.path.join(path, "version.py"))
    lib = os.path.join(path, "lib")
    return (
        Torch(
            version=fields.get("__version__") or _dist_version("torch") or "unknown",
            path=path,
            cuda=fields.get("cuda"),
            git_version=fields.get("git_version"),
            gloo_built=_dynstr_has(os.path.join(lib, "libtorch_cpu.so"), b"ProcessGroupGloo"),
            nccl_built=_nccl_built(lib),
        ),
        None,
    )


def _version_py(file: str) -> dict[str, str | None]:
    text = _sysfs.read(file) or ""
    found: dict[str, str | None] = {}
    for key, value in re.findall(r"^(\w+)\s*(?::[^=]*)?=\s*(.+)$", text, re.M):
        value = value.strip()
        found[key] = None if value == "None" else value.strip("'\"")
    return found


def _dist_version(name: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # any broken metadata means "unknown"
        return None


def _nccl_wheel() -> str | None:
    for name in NCCL_WHEELS:
        version = _dist_version(name)
        if version:
            return f"{name}=={version}"
    return None


def _nccl_built(lib: str) -> bool | None:
    cuda_lib = os.path.join(lib, "libtorch_cuda.so")
    if not os.path.exists(cuda_lib):
        return False if os.path.exists(os.path.join(lib, "libtorch_cpu.so")) else None
    return _dynstr_has(cuda_lib, b"ProcessGroupNCCL")


def _dynstr_has(file: str, needle: bytes) -> bool | None:
    """Whether ``needle`` is in an ELF64 file's dynamic string table (its exported names)."""
    try:
        with open(file, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as elf:
            shoff, shentsize, shnum = struct.unpack_from("<Q", elf, 0x28)[0], *struct.unpack_from("<HH", elf, 0x3A)
            sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
            for section in sections:
                if section[1] == SHT_DYNSYM:
                    strtab = sections[section[6]]
                    start, size = strtab[4], strtab[5]
                    return elf.find(needle, start, start + size) >= 0
    except (OSError, ValueError, struct.error, IndexError):
        return None
    return None


def nccl_candidates(site: str | None, torch: Torch | None) -> tuple[tuple[str, str], ...]:
    """libnccl files in the order the loader would consider them for torch."""
    found: list[tuple[str, str]] = []
    for item in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        if "libnccl" in os.path.basename(item):
            found.append((item, "LD_PRELOAD"))
    if torch:
        found += [(p, "torch/lib") for p in sorted(glob.glob(os.path.join(torch.path, "lib", "libnccl.so*")))]
    if site:
        found += [
            (p, "nvidia-nccl wheel") for p in sorted(glob.glob(os.path.join(site, "nvidia/nccl/lib/libnccl.so*")))
        ]
    for directory in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if directory:
            found += [(p, "LD_LIBRARY_PATH") for p in sorted(glob.glob(os.path.join(directory, "libnccl.so*")))]
    system = ctypes.util.find_library("nccl")
    if system:
        found.append((system, "ld.so cache"))
    return _unique(found)


def _unique(items: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    seen: set[str] = set()
    kept = []
    for path, origin in items:
        real = os.path.realpath(path) if os.path.isabs(path) else path
        if real not in seen:
            seen.add(real)
            kept.append((path, origin))
    return tuple(kept)


def _load(path: str, origin: str) -> NcclLib:
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return NcclLib(path, origin, None, "ncclGetVersion returned an error")
        return NcclLib(path, origin, code.value, None)
    except (OSError, AttributeError) as exc:
        return NcclLib(path, origin, None, str(exc))


def _cuda_driver_api() -> int | None:
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value


def main(argv: list[str] | None = None) -> int:
    return _sysfs.print_json(collect(_sysfs.root_from_argv(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
