"""The real NCCL as a test oracle: ``libnccl.so.2`` from NVIDIA's ``nvidia-nccl-cu12`` wheel.

Its ``ncclGetVersion`` and ``ncclGetUniqueId`` (the bootstrap, which picks NCCL's socket interface) run without
a GPU. The wheel (about 350 MB) is fetched from the package index once with ``pip download`` and its library
unpacked under ``${NCCL_ORACLE_DIR:-/tmp/ncclcheck-libnccl}/VERSION/nvidia/nccl/lib/`` (the layout
``../shared/tools/libnccl`` uses, so either fills the cache for the other). A test that cannot get it skips
with the reason (offline, no pip, another platform).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

VERSION = "2.32.3"
MEMBER = "nvidia/nccl/lib/libnccl.so.2"


def cache_dir() -> Path:
    return Path(os.environ.get("NCCL_ORACLE_DIR") or "/tmp/ncclcheck-libnccl")


def libnccl(version: str = VERSION) -> tuple[Path | None, str]:
    """The path of the real ``libnccl.so.2`` (downloaded and unpacked the first time), or None and why not."""
    base = cache_dir()
    lib = base / version / MEMBER
    if lib.is_file():
        return lib, ""
    try:
        base.mkdir(parents=True, exist_ok=True)
        with open(base / ".lock", "w") as lock:  # two test workers: one downloads, the other waits for it
            fcntl.flock(lock, fcntl.LOCK_EX)
            if lib.is_file():
                return lib, ""
            return _fetch(base, version, lib)
    except OSError as exc:
        return None, f"cannot use the cache {base}: {exc}"


def _fetch(base: Path, version: str, lib: Path) -> tuple[Path | None, str]:
    wheels = base / "whl"
    spec = f"nvidia-nccl-cu12=={version}"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), spec],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"`pip download {spec}` took over 20 minutes"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"`pip download {spec}` failed: {last}"
    found = sorted(wheels.glob(f"nvidia_nccl_cu12-{version}-*.whl"))
    if not found:
        return None, f"`pip download {spec}` left no wheel in {wheels}"
    try:
        with zipfile.ZipFile(found[-1]) as wheel, wheel.open(MEMBER) as source:
            lib.parent.mkdir(parents=True, exist_ok=True)
            partial = lib.with_name(f".{lib.name}.{os.getpid()}")
            with open(partial, "wb") as target:
                shutil.copyfileobj(source, target)
            os.replace(partial, lib)  # never a half-written library at the path
    except (KeyError, zipfile.BadZipFile) as exc:
        return None, f"{found[-1]} holds no usable {MEMBER}: {exc}"
    return lib, ""


def require_libnccl(version: str = VERSION) -> Path:
    """The real library, or skip the test with the reason it cannot be had."""
    lib, why = libnccl(version)
    if lib is None:
        pytest.skip(f"real libnccl {version} unavailable: {why}")
    return lib
