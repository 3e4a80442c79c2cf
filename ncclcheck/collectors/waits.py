"""What a thread is blocked in, from the kernel: ``/proc/PID/task/TID/syscall`` (the system call and its arguments),
``wchan`` (the kernel function it sleeps in), the file descriptor's target in ``/proc/PID/fd`` and, for a TCP socket,
its two ends from the socket table. Read-only; ``syscall`` needs the same access as py-spy (ptrace): where it is
refused, the wait is ``None`` and the stack alone speaks.

A blocking ``open`` of a FIFO has no descriptor yet: its path is read from the process's memory (``/proc/PID/mem``
at the call's argument, the same access again); a ``poll`` on one descriptor likewise (Python's socket timeouts).
"""

from __future__ import annotations

import os
import platform
import struct

from ncclcheck.collectors.sockets import TcpSocket
from ncclcheck.model.waits import KernelWait

# The system calls a blocked thread is seen in, by number: x86_64, and the generic table (aarch64, riscv64).
X86_64 = {
    0: "read",
    1: "write",
    2: "open",
    7: "poll",
    17: "pread64",
    19: "readv",
    23: "select",
    34: "pause",
    35: "nanosleep",
    42: "connect",
    43: "accept",
    44: "sendto",
    45: "recvfrom",
    47: "recvmsg",
    61: "wait4",
    72: "fcntl",
    73: "flock",
    202: "futex",
    230: "clock_nanosleep",
    232: "epoll_wait",
    247: "waitid",
    257: "openat",
    270: "pselect6",
    271: "ppoll",
    281: "epoll_pwait",
    288: "accept4",
    299: "recvmmsg",
    441: "epoll_pwait2",
    449: "futex_waitv",
}
GENERIC = {
    22: "epoll_pwait",
    25: "fcntl",
    32: "flock",
    56: "openat",
    63: "read",
    64: "write",
    65: "readv",
    67: "pread64",
    72: "pselect6",
    73: "ppoll",
    95: "waitid",
    98: "futex",
    101: "nanosleep",
    115: "clock_nanosleep",
    202: "accept",
    203: "connect",
    206: "sendto",
    207: "recvfrom",
    212: "recvmsg",
    242: "accept4",
    243: "recvmmsg",
    260: "wait4",
    441: "epoll_pwait2",
    449: "futex_waitv",
}
TABLE = X86_64 if platform.machine() in ("x86_64", "amd64") else GENERIC
FD_FIRST = frozenset(
    {"read", "write", "pread64", "readv", "recvfrom", "recvmsg", "recvmmsg", "sendto", "accept", "accept4", "connect"}
)
FD_FIRST |= {"flock", "fcntl"}
AT_FDCWD = 0xFFFFFF9C
PATH_MAX = 4096


def kernel_wait(pid: int, tid: int, sockets: dict[int, TcpSocket] | None) -> KernelWait | None:
    """The thread's system call and what it waits on; None where the kernel does not let us read it."""
    syscall = _read(f"/proc/{pid}/task/{tid}/syscall")
    wchan = (_read(f"/proc/{pid}/task/{tid}/wchan") or "").strip()
    if syscall is None:
        return None
    words = syscall.split()
    if not words or words[0] == "running":
        return KernelWait(None, "", running=True)
    if words[0] == "-1" or not words[0].lstrip("-").isdigit():
        return KernelWait(None, "" if wchan == "0" else wchan)  # blocked, not in a system call (a page fault)
    name = TABLE.get(int(words[0]), f"syscall {words[0]}")
    args = [int(w, 16) for w in words[1:7]]
    wait = KernelWait(name, "" if wchan == "0" else wchan)
    if name in FD_FIRST and args:
        return _with_fd(wait, pid, args[0], sockets)
    if name in ("poll", "ppoll") and len(args) > 1 and args[1] == 1:  # one descriptor: a socket's timeout
        fd = _pollfd(pid, args[0])
        return _with_fd(wait, pid, fd, sockets) if fd is not None else wait
    if name in ("wait4", "waitid") and args:
        child = args[1] if name == "waitid" else args[0]
        return KernelWait(name, wait.wchan, child=_signed(child))
    if name in ("openat", "open") and args:
        at = args[1] if name == "openat" else args[0]
        path = _string(pid, at)
        return KernelWait(name, wait.wchan, target=path) if path else wait
    return wait


def _with_fd(wait: KernelWait, pid: int, fd: int, sockets: dict[int, TcpSocket] | None) -> KernelWait:
    fd = _signed(fd)
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return KernelWait(wait.syscall, wait.wchan, fd=fd)
    if target.startswith("socket:[") and sockets is not None:
        sock = sockets.get(int(target[8:-1]))
        if sock is not None:
            return KernelWait(
                wait.syscall,
                wait.wchan,
                fd=fd,
                target=target,
                peer=f"{sock.remote_addr}:{sock.remote_port}",
                local=f":{sock.local_port}",
            )
        listening = _listening(pid, int(target[8:-1]))
        return KernelWait(wait.syscall, wait.wchan, fd=fd, target=target, listening=listening)
    return KernelWait(wait.syscall, wait.wchan, fd=fd, target=target)


def _listening(pid: int, inode: int) -> bool:
    """Whether socket ``inode`` is a listening TCP socket (the diag table leaves listeners out): /proc/PID/net/tcp."""
    for table in ("tcp", "tcp6"):
        text = _read(f"/proc/{pid}/net/{table}") or ""
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[9] == str(inode):
                return fields[3] == "0A"
    return False


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value if value < 1 << 31 else value - (1 << 32)


def _pollfd(pid: int, address: int) -> int | None:
    """The descriptor of a one-entry ``struct pollfd`` array at ``address`` of the process's memory."""
    data = _memory(pid, address, 8)
    return struct.unpack("=ihh", data)[0] if data is not None and len(data) == 8 else None


def _string(pid: int, address: int) -> str | None:
    if address in (0, AT_FDCWD):
        return None
    data = _memory(pid, address, PATH_MAX)
    if not data:
        return None
    return data.split(b"\0", 1)[0].decode(errors="replace") or None


def _memory(pid: int, address: int, size: int) -> bytes | None:
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.pread(fd, size, address)
    except (OSError, OverflowError, ValueError):
        return None
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None
