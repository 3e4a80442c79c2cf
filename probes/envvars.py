"""The effective NCCL/torch/gloo environment: the process environment plus NCCL's config files.

NCCL reads ``$NCCL_CONF_FILE`` (2.23+) or else ``~/.nccl.conf``, then ``/etc/nccl.conf``, and
applies each ``NAME=value`` line with ``setenv(..., overwrite=0)``: the environment wins over
the user file, which wins over the system file (NVIDIA/nccl src/misc/param.cc).

Run alone on a node: ``python3 probes/envvars.py [--root DIR]`` prints JSON. Stdlib only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/envvars.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "GLOO_", "TP_", "SLURM_", "PET_", "OMPI_COMM_WORLD_")
NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NODE_RANK",
    "USE_LIBUV",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "HOME",
    "SBATCH_SIGNAL",  # sbatch --signal, when set as a variable (env.timeouts shows it)
)


@dataclass(frozen=True)
class EnvVar:
    """One variable as a process would see it, and where its value came from."""

    name: str
    value: str
    source: str
    line: int | None


@dataclass(frozen=True)
class ConfFile:
    """An NCCL config file that NCCL would read, and whether it could be read."""

    path: str
    exists: bool
    readable: bool


@dataclass(frozen=True)
class EnvFacts:
    """Effective variables (first wins), config-file lines the environment overrides, files read."""

    effective: tuple[EnvVar, ...]
    shadowed: tuple[EnvVar, ...]
    conf_files: tuple[ConfFile, ...]


def relevant(name: str) -> bool:
    """Whether ncclcheck cares about a variable of this name."""
    return name in NAMES or name.startswith(PREFIXES)


def collect(root: str = "/", environ: Mapping[str, str] | None = None) -> EnvFacts:
    """Merge ``environ`` (default ``os.environ``) with the NCCL config files under ``root``."""
    env = dict(os.environ if environ is None else environ)
    effective = [EnvVar(k, v, "environment", None) for k, v in sorted(env.items()) if relevant(k)]
    shadowed: list[EnvVar] = []
    files = conf_paths(env)
    confs = []
    for path in files:
        full = _sysfs.path(root, path.lstrip("/")) if os.path.isabs(path) else path
        text = _sysfs.read(full)
        confs.append(ConfFile(path, os.path.exists(full), text is not None))
        for var in parse_conf(text or "", path):
            known = {v.name for v in effective}
            (shadowed if var.name in known else effective).append(var)
    return EnvFacts(tuple(effective), tuple(shadowed), tuple(confs))


def conf_paths(env: Mapping[str, str]) -> tuple[str, ...]:
    """The config files NCCL reads, in its order."""
    user = env.get("NCCL_CONF_FILE") or os.path.join(env.get("HOME", "~"), ".nccl.conf")
    return (user, "/etc/nccl.conf")


def parse_conf(text: str, path: str) -> tuple[EnvVar, ...]:
    """NCCL's parser: skip ``#`` lines, split at the first ``=``, trim nothing."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.rstrip("\r\n")
        if line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        found.append(EnvVar(name, value, path, number))
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    return _sysfs.print_json(collect(_sysfs.root_from_argv(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
