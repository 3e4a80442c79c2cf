"""Host facts that break NCCL/gloo or ncclcheck itself: /dev/shm, hostname, ptrace, memlock.

Run alone on a node: ``python3 probes/host.py [--root DIR]`` prints JSON. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from dataclasses import dataclass

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/host.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

CAP_IPC_LOCK = 14
CAP_SYS_PTRACE = 19
UNLIMITED = -1


@dataclass(frozen=True)
class ShmSegment:
    """A file under /dev/shm, e.g. a stale ``nccl-XXXXXX`` segment of a crashed job."""

    name: str
    size_bytes: int


@dataclass(frozen=True)
class Shm:
    """What statvfs and mountinfo say of /dev/shm."""

    path: str
    exists: bool
    writable: bool
    size_bytes: int | None
    free_bytes: int | None
    fstype: str | None
    nccl_segments: tuple[ShmSegment, ...]


@dataclass(frozen=True)
class HostAddr:
    """One address the hostname resolves to, and whether a socket can bind it (gloo's test)."""

    addr: str
    bindable: bool


@dataclass(frozen=True)
class Hostname:
    """The hostname, what it resolves to, and the /etc/hosts lines that name it."""

    hostname: str
    addrs: tuple[HostAddr, ...]
    resolve_error: str | None
    hosts_lines: tuple[str, ...]
    boot_id: str | None


@dataclass(frozen=True)
class Ptrace:
    """Whether py-spy can attach to processes here."""

    scope: int | None
    cap_sys_ptrace: bool
    uid: int
    py_spy: str | None
    container: str | None


@dataclass(frozen=True)
class Memlock:
    """RLIMIT_MEMLOCK (-1 = unlimited) and the capability that bypasses it."""

    soft: int | None
    hard: int | None
    cap_ipc_lock: bool


@dataclass(frozen=True)
class HostFacts:
    """Everything the host checks need."""

    shm: Shm
    hostname: Hostname
    ptrace: Ptrace
    memlock: Memlock


def collect(root: str = "/") -> HostFacts:
    """Read the host facts; files under ``root``, limits and sockets from the live process."""
    cap_eff = _cap_eff(root)
    return HostFacts(
        shm=_shm(_sysfs.path(root, "dev/shm"), root),
        hostname=_hostname(root),
        ptrace=Ptrace(
            scope=_sysfs.read_int(_sysfs.path(root, "proc/sys/kernel/yama/ptrace_scope")),
            cap_sys_ptrace=bool(cap_eff >> CAP_SYS_PTRACE & 1),
            uid=int((_status_field(root, "Uid") or str(os.getuid())).split()[0]),
            py_spy=find_py_spy(),
            container=_container(root),
        ),
        memlock=_memlock(root, cap_eff),
    )


def _status_field(root: str, field: str) -> str | None:
    """A field of /proc/self/status (the live process, or the one saved in a copied tree)."""
    status = _sysfs.read(_sysfs.path(root, "proc/self/status")) or ""
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def _cap_eff(root: str) -> int:
    value = _status_field(root, "CapEff")
    try:
        return int(value, 16) if value else 0
    except ValueError:
        where = _sysfs.path(root, "proc/self/status")
        raise _sysfs.SavedTreeError(f"{where}: CapEff is {value!r}, not a hex capability mask") from None


def _shm(path: str, root: str) -> Shm:
    exists = os.path.isdir(path)
    size = free = None
    if exists:
        try:
            st = os.statvfs(path)
            size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            pass
    return Shm(
        path=path,
        exists=exists,
        writable=exists and os.access(path, os.W_OK),
        size_bytes=size,
        free_bytes=free,
        fstype=_mount_type(root, "/dev/shm"),
        nccl_segments=_nccl_segments(path),
    )


def _mount_type(root: str, mountpoint: str) -> str | None:
    text = _sysfs.read(_sysfs.path(root, "proc/self/mountinfo")) or ""
    found = None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and fields[4] == mountpoint and right:
            found = right.split()[0]
    return found


def _nccl_segments(path: str) -> tuple[ShmSegment, ...]:
    segments = []
    for name in _sysfs.listdir(path):
        if name.startswith("nccl-"):
            try:
                segments.append(ShmSegment(name, os.stat(os.path.join(path, name)).st_size))
            except OSError:
                continue
    return tuple(sorted(segments, key=lambda s: -s.size_bytes))


def _hostname(root: str) -> Hostname:
    name = socket.gethostname()
    addrs: list[HostAddr] = []
    error = None
    if root != "/":  # a copied tree: this machine's name says nothing of that node's (host.hostname is live-only)
        return Hostname(name, (), "not resolved for a copied tree", (), None)
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError as exc:
        infos, error = [], str(exc)
    for family, _, _, _, sockaddr in infos:
        addr = str(sockaddr[0])
        if all(a.addr != addr for a in addrs):
            addrs.append(HostAddr(addr, _bindable(family, addr)))
    hosts = _sysfs.read(_sysfs.path(root, "etc/hosts")) or ""
    lines = tuple(line.strip() for line in hosts.splitlines() if name in line.split("#", 1)[0].split()[1:])
    boot_id = _sysfs.read(_sysfs.path(root, "proc/sys/kernel/random/boot_id"))
    return Hostname(name, tuple(addrs), error, lines, boot_id)


def _bindable(family: int, addr: str) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((addr, 0))
        return True
    except OSError:
        return False


def find_py_spy() -> str | None:
    """py-spy beside this Python (a venv's bin/) or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def _container(root: str) -> str | None:
    if os.path.exists(_sysfs.path(root, ".dockerenv")):
        return "docker"
    if os.path.exists(_sysfs.path(root, "run/.containerenv")):
        return "podman"
    cgroup = _sysfs.read(_sysfs.path(root, "proc/1/cgroup")) or ""
    for marker in ("kubepods", "docker", "containerd", "lxc"):
        if marker in cgroup:
            return marker
    return None


def _memlock(root: str, cap_eff: int) -> Memlock:
    """RLIMIT_MEMLOCK from /proc/self/limits ("Max locked memory  <soft> <hard> bytes")."""
    limits = _sysfs.read(_sysfs.path(root, "proc/self/limits")) or ""
    for line in limits.splitlines():
        if line.startswith("Max locked memory"):
            soft, hard = line.split()[3:5]
            return Memlock(_limit(soft), _limit(hard), bool(cap_eff >> CAP_IPC_LOCK & 1))
    return Memlock(None, None, bool(cap_eff >> CAP_IPC_LOCK & 1))


def _limit(text: str) -> int | None:
    if text == "unlimited":
        return UNLIMITED
    return int(text) if text.isdigit() else None


def main(argv: list[str] | None = None) -> int:
    return _sysfs.print_json(collect(_sysfs.root_from_argv(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
