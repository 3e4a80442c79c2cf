"""Network interfaces exactly as NCCL and gloo see them: getifaddrs(3) order, flags, sysfs state.

Run alone on a node: ``python3 probes/net.py [--root DIR]`` prints JSON. With ``--root`` the
addresses come from ``DIR/ifaddrs.json`` (this probe's ``ifaddrs`` list, saved from a node).
Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass

try:
    from . import _sysfs
except ImportError:  # run as a script: python3 probes/net.py
    import _sysfs  # type: ignore[no-redef,import-not-found]

IFF_NAMES = (
    (0x1, "UP"),
    (0x2, "BROADCAST"),
    (0x8, "LOOPBACK"),
    (0x10, "POINTOPOINT"),
    (0x40, "RUNNING"),
    (0x1000, "MULTICAST"),
)


@dataclass(frozen=True)
class IfAddr:
    """One getifaddrs(3) entry with an IPv4 or IPv6 address, in the order glibc returns them."""

    name: str
    family: str
    addr: str
    netmask: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class Link:
    """Per-interface sysfs facts (``/sys/class/net/<name>``)."""

    name: str
    operstate: str | None
    mtu: int | None
    type: int | None
    carrier: int | None


@dataclass(frozen=True)
class NetFacts:
    """The node's interfaces; ``source`` says where the addresses came from."""

    source: str
    ifaddrs: tuple[IfAddr, ...]
    links: tuple[Link, ...]


NOT_SAVED = "not in the saved tree"


def collect(root: str = "/") -> NetFacts:
    """Addresses from getifaddrs (or, under a saved tree, its ``ifaddrs.json``) and link facts from sysfs."""
    saved = os.path.join(root, "ifaddrs.json")
    if root == "/":
        source, addrs = "getifaddrs", _getifaddrs()
    elif os.path.exists(saved):
        source, addrs = saved, _load_saved(saved)
    else:
        source, addrs = NOT_SAVED, ()  # never this machine's interfaces in place of the node's
    net_dir = _sysfs.path(root, "sys/class/net")
    names = _sysfs.listdir(net_dir)
    for addr in addrs:
        if addr.name not in names:
            names.append(addr.name)
    links = tuple(_link(net_dir, name) for name in names)
    return NetFacts(source=source, ifaddrs=addrs, links=links)


def _link(net_dir: str, name: str) -> Link:
    base = os.path.join(net_dir, name)
    return Link(
        name=name,
        operstate=_sysfs.read(os.path.join(base, "operstate")),
        mtu=_sysfs.read_int(os.path.join(base, "mtu")),
        type=_sysfs.read_int(os.path.join(base, "type")),
        carrier=_sysfs.read_int(os.path.join(base, "carrier")),
    )


def _load_saved(file: str) -> tuple[IfAddr, ...]:
    try:
        with open(file, encoding="utf-8") as handle:
            rows = json.load(handle)
        return tuple(
            IfAddr(
                name=str(row["name"]),
                family=str(row["family"]),
                addr=str(row["addr"]),
                netmask=str(row.get("netmask", "")),
                flags=tuple(str(f) for f in row.get("flags", ())),
            )
            for row in rows
        )
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"no {exc} field" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise _sysfs.SavedTreeError(
            f"{file} is not a list of interfaces as `python3 probes/net.py --ifaddrs` writes ({why})"
        ) from None


class _SockAddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 26)]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [
    ("next", ctypes.POINTER(_IfAddrs)),
    ("name", ctypes.c_char_p),
    ("flags", ctypes.c_uint),
    ("addr", ctypes.POINTER(_SockAddr)),
    ("netmask", ctypes.POINTER(_SockAddr)),
    ("ifu", ctypes.c_void_p),
    ("data", ctypes.c_void_p),
]


def _getifaddrs() -> tuple[IfAddr, ...]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return ()
    rows = []
    try:
        node = head
        while node:
            entry = node.contents
            row = _entry(entry)
            if row is not None:
                rows.append(row)
            node = entry.next
    finally:
        libc.freeifaddrs(head)
    return tuple(rows)


def _entry(entry: _IfAddrs) -> IfAddr | None:
    if not entry.addr:
        return None
    family = entry.addr.contents.family
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return IfAddr(
        name=(entry.name or b"").decode(errors="replace"),
        family="AF_INET" if family == socket.AF_INET else "AF_INET6",
        addr=_ip(entry.addr.contents),
        netmask=_ip(entry.netmask.contents) if entry.netmask else "",
        flags=tuple(name for bit, name in IFF_NAMES if entry.flags & bit),
    )


def _ip(addr: _SockAddr) -> str:
    raw = bytes(addr.data)
    if addr.family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[2:6])
    if addr.family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw[6:22])
    return ""


def prefix_len(netmask: str) -> int | None:
    """``255.255.255.0`` -> 24, ``ffff:ffff::`` -> 32; None when it is not a netmask."""
    try:
        packed = ipaddress.ip_address(netmask).packed
    except ValueError:
        return None
    bits = "".join(f"{byte:08b}" for byte in packed)
    ones = bits.rstrip("0")
    return len(ones) if "0" not in ones else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = args[args.index("--root") + 1] if "--root" in args else "/"
    facts = collect(root)
    if "--ifaddrs" in args:
        print(json.dumps([asdict(a) for a in facts.ifaddrs], indent=1))
    else:
        print(json.dumps(asdict(facts), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
