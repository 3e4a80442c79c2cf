"""NCCL's own selection rules, re-implemented as pure functions so ncclcheck predicts what NCCL does.

Sources (NVIDIA/nccl 2.30.7 unless noted): ``parseStringList``/``matchIfList`` (src/misc/utils.cc),
``ncclFindInterfaces``, ``ncclSocketGetAddrFromString`` (src/misc/socket.cc), ``ncclOsFindInterfaces``,
``ncclFindInterfaceMatchSubnet`` (src/os/linux.cc), ``bootstrapNetInit`` (src/bootstrap.cc), ``ncclIbInitDevices``
(src/transport/net_ib/init.cc) and ``ncclIbGetGidIndex`` (src/transport/net_ib/connect.cc).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncclcheck.probes.ib import Hca, Port
from ncclcheck.probes.net import IfAddr

Version = tuple[int, int, int]
MAX_IFS = 16
ACTIVE = 4
USABLE_LINK_LAYERS = ("InfiniBand", "Ethernet")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
# Bridges, overlays, tunnels and container veths: NCCL may pick them, other nodes usually cannot reach
# them. The one list `env` (what NCCL would pick) and `logs` (what NCCL did pick) both judge by.
VIRTUAL_INTERFACE = re.compile(
    r"^(?:docker|br-|veth|cni|flannel|cali|virbr|tun|tap|weave|kube|vxlan|lxc|podman|ip6tnl)"
)


def decode_version(code: int) -> Version:
    """``ncclGetVersion`` code to (major, minor, patch): X*10000+Y*100+Z since 2.9, X*1000+... before."""
    if code >= 10000:
        return code // 10000, code // 100 % 100, code % 100
    return code // 1000, code // 100 % 10, code % 100


def version_text(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "unknown"


@dataclass(frozen=True)
class IfList:
    """A parsed ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` value."""

    tokens: tuple[tuple[str, int], ...]
    exclude: bool
    exact: bool


def parse_list(value: str) -> IfList:
    """NCCL's syntax: leading ``^`` excludes, then leading ``=`` makes every token exact.

    Tokens are ``name[:port]``; port -1 means any port.
    """
    exclude = value.startswith("^")
    if exclude:
        value = value[1:]
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    tokens = []
    for token in value.split(","):
        if not token:
            continue
        name, _, rest = token.partition(":")
        port_text = rest.split(":", 1)[0]
        port = int(port_text) if port_text.isdigit() else -1
        tokens.append((name, port))
    return IfList(tuple(tokens), exclude, exact)


def matches(name: str, port: int, iflist: IfList) -> bool:
    """``matchIfList``: an empty list matches everything; otherwise any token (prefix or exact)."""
    if not iflist.tokens:
        return True
    for token, token_port in iflist.tokens:
        hit = name == token if iflist.exact else name.startswith(token)
        if hit and (token_port == -1 or port == -1 or token_port == port):
            return True
    return False


def selected(name: str, port: int, iflist: IfList) -> bool:
    """Whether a list value selects ``name`` (inclusive list, or not excluded)."""
    return matches(name, port, iflist) != iflist.exclude


def find_interfaces(
    addrs: Sequence[IfAddr], value: str, *, need_running: bool, family: str | None = None
) -> tuple[IfAddr, ...]:
    """``ncclFindInterfaces(prefixList)``: getifaddrs order, first address of each name wins."""
    iflist = parse_list(value)
    found: list[IfAddr] = []
    for addr in addrs:
        if need_running and "RUNNING" not in addr.flags:
            continue
        if family and addr.family != family:
            continue
        if addr.family == "AF_INET6" and addr.addr == "::1":
            continue
        if not selected(addr.name, -1, iflist) or any(f.name == addr.name for f in found):
            continue
        found.append(addr)
    return tuple(found[:MAX_IFS])


NO_INTERFACE = "Bootstrap : no socket interface found"
NO_SUBNET = "NET/Socket : No usable listening interface found"
BAD_COMM_ID = "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>"


@dataclass(frozen=True)
class Bootstrap:
    """The interface NCCL's bootstrap binds (``bootstrapNetInit``). ``addr`` None: NCCL finds none and fails
    with ``error`` (NCCL's words), or, ``error`` None too, it cannot be told here (NCCL_COMM_ID names a host,
    and which interface is in the subnet of its address depends on what the name resolves to)."""

    addr: IfAddr | None
    rule: str
    error: str | None


@dataclass(frozen=True)
class SocketPick:
    """The interfaces NCCL would use for sockets and the one its bootstrap binds: the first of them, unless
    NCCL_COMM_ID is set."""

    interfaces: tuple[IfAddr, ...]
    rule: str
    ignored_value: str | None
    bootstrap: Bootstrap


def socket_interfaces(addrs: Sequence[IfAddr], env: Mapping[str, str], version: Version | None) -> SocketPick:
    """What NCCL picks with the effective environment ``env`` (NCCL_SOCKET_IFNAME, _FAMILY, NCCL_COMM_ID)."""
    interfaces, rule, ignored = _find_interfaces(addrs, env, version)
    return SocketPick(interfaces, rule, ignored, bootstrap_interface(addrs, env, interfaces, rule))


def _find_interfaces(
    addrs: Sequence[IfAddr], env: Mapping[str, str], version: Version | None
) -> tuple[tuple[IfAddr, ...], str, str | None]:
    """``ncclFindInterfaces``: the interfaces, the rule that found them, and a one-character value NCCL ignored."""
    new_rules = version is None or version >= (2, 28, 0)
    family = env.get("NCCL_SOCKET_FAMILY")
    family = family if family in ("AF_INET", "AF_INET6") else None
    value = env.get("NCCL_SOCKET_IFNAME")
    ignored = value if value is not None and len(value) <= 1 else None

    def find(prefixes: str) -> tuple[IfAddr, ...]:
        return find_interfaces(addrs, prefixes, need_running=new_rules, family=family)

    if value is not None and len(value) > 1:
        return find(value), f"NCCL_SOCKET_IFNAME={value}", None
    found = find("ib")
    if found:
        return found, "default (ib)", ignored
    comm_id = env.get("NCCL_COMM_ID")
    if comm_id is not None and len(comm_id) > 1:
        remote = parse_comm_id(comm_id)
        hit = subnet_interface(addrs, remote) if isinstance(remote, CommId) else None
        if hit is not None:
            return (hit,), f"default (the subnet of NCCL_COMM_ID={comm_id})", ignored
    default = "^docker,lo,virbr" if new_rules else "^docker,lo"
    for prefixes in [default, "docker", "lo"] + (["virbr"] if new_rules else []):
        found = find(prefixes)
        if found:
            return found, f"default ({prefixes})", ignored
    return (), "default", ignored


@dataclass(frozen=True)
class CommId:
    """An ``NCCL_COMM_ID`` address as ``ncclSocketGetAddrFromString`` reads it: an IP literal (``scope``: the
    interface named after ``%`` in ``[fe80::1%eth0]:port``), or ``host``, a name NCCL resolves."""

    addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    scope: str | None = None
    host: str | None = None


def parse_comm_id(value: str) -> CommId | None:
    """``<ipv4>:<port>``, ``[<ipv6>]:<port>`` or ``<host>:<port>``; None where NCCL rejects it."""
    if len(value) <= 1:
        return None
    if value.startswith("["):
        close = value.find("]", 1)
        if close < 0:
            return None
        inside = value[1:close]
        text, percent, scope = inside.rpartition("%") if "%" in inside else (inside, "", "")
        try:
            return CommId(ipaddress.IPv6Address(text), scope if percent else None)
        except ValueError:
            return CommId(None, host=text)  # inet_pton fails and NCCL goes on with an address never set
    first = next((t for t in value.split(",") if t), "")  # parseStringList(value, &ni, 1)
    name = first.split(":", 1)[0]
    if not name:
        return None
    try:
        return CommId(ipaddress.ip_address(name))
    except ValueError:
        return CommId(None, host=name)  # getaddrinfo: what it resolves to is not known here


def same_subnet(local: IfAddr, remote: CommId) -> bool:
    """``matchSubnet``: the same family, the same network under the local netmask, and (IPv6) the same scope:
    a link-local local address carries its interface as scope, a global one none."""
    if remote.addr is None or local.family != ("AF_INET" if remote.addr.version == 4 else "AF_INET6"):
        return False
    try:
        mine = ipaddress.ip_address(local.addr.split("%", 1)[0])
        mask = int(ipaddress.ip_address(local.netmask)) if local.netmask else 0
    except ValueError:
        return False
    if int(mine) & mask != int(remote.addr) & mask:
        return False
    if remote.addr.version == 6:
        scoped = mine.is_link_local
        return (remote.scope == local.name) if scoped else remote.scope is None
    return True


def subnet_interface(addrs: Sequence[IfAddr], remote: CommId) -> IfAddr | None:
    """``ncclFindInterfaceMatchSubnet``: the first getifaddrs entry in ``remote``'s subnet, running or not."""
    return next((a for a in addrs if same_subnet(a, remote)), None)


def bootstrap_interface(
    addrs: Sequence[IfAddr], env: Mapping[str, str], interfaces: Sequence[IfAddr], rule: str
) -> Bootstrap:
    """``bootstrapNetInit``: with NCCL_COMM_ID set (even empty) the interface in its address's subnet, whatever
    NCCL_SOCKET_IFNAME says; otherwise the first interface ``ncclFindInterfaces`` found."""
    value = env.get("NCCL_COMM_ID")
    if value is None:
        return Bootstrap(interfaces[0] if interfaces else None, rule, None if interfaces else NO_INTERFACE)
    comm_rule = f"the subnet of NCCL_COMM_ID={value}"
    remote = parse_comm_id(value)
    if remote is None:
        return Bootstrap(None, comm_rule, BAD_COMM_ID)
    if remote.addr is None:
        return Bootstrap(None, comm_rule, None)
    hit = subnet_interface(addrs, remote)
    return Bootstrap(hit, comm_rule, None if hit else NO_SUBNET)


def port_usable(port: Port) -> bool:
    """NCCL skips ports that are not ACTIVE or whose link layer is neither IB nor Ethernet."""
    return state_number(port.state) == ACTIVE and port.link_layer in USABLE_LINK_LAYERS


def state_number(state: str | None) -> int | None:
    """``"4: ACTIVE"`` -> 4."""
    if not state:
        return None
    head = state.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


def ib_ports(hcas: Sequence[Hca], ib_hca: str | None, *, usable_only: bool = True) -> tuple[Port, ...]:
    """The ports ``ncclIbInitDevices`` would open with ``NCCL_IB_HCA=ib_hca``."""
    iflist = parse_list(ib_hca or "")
    return tuple(
        port
        for hca in hcas
        for port in hca.ports
        if (port_usable(port) or not usable_only) and selected(hca.name, port.port, iflist)
    )


def gid_bytes(gid: str) -> bytes:
    try:
        return ipaddress.IPv6Address(gid).packed
    except ValueError:
        return bytes(16)


def gid_family(gid: str) -> str:
    """NCCL's ``getGidAddrFamily``: IPv4-mapped (or multicast-mapped) GIDs are AF_INET."""
    raw = gid_bytes(gid)
    v4_mapped = raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff"
    mc_mapped = raw[:2] == b"\xff\x0e" and raw[2:10] == bytes(8) and raw[10:12] == b"\xff\xff"
    return "AF_INET" if v4_mapped or mc_mapped else "AF_INET6"


def gid_link_local(gid: str) -> bool:
    raw = gid_bytes(gid)
    return raw[:4] == b"\xfe\x80\x00\x00" and raw[4:8] == bytes(4)


def gid_configured(gid: str) -> bool:
    raw = gid_bytes(gid)
    return raw != bytes(16) and not (gid_link_local(gid) and raw[8:] == bytes(8))


def gid_valid(gid: str) -> bool:
    """``validGid``: configured and not link-local."""
    return gid_configured(gid) and not gid_link_local(gid)


def gid_ipv4(gid: str) -> str:
    """The IPv4 address inside an IPv4-mapped GID, as show_gids prints it; "" otherwise."""
    raw = gid_bytes(gid)
    return ".".join(str(b) for b in raw[12:]) if gid.startswith("0000") and raw[10:12] == b"\xff\xff" else ""


def roce_version(gid_type: str | None) -> int | None:
    if not gid_type:
        return None
    if gid_type.startswith(("IB/RoCE v1", "RoCE v1")):
        return 1
    if gid_type.startswith("RoCE v2"):
        return 2
    return None


def in_range(gid: str, addr_range: str | None) -> bool:
    """``NCCL_IB_ADDR_RANGE``: ignored when unset or unparsable for the GID's family."""
    if not addr_range or "/" not in addr_range:
        return True
    try:
        network = ipaddress.ip_network(addr_range, strict=False)
    except ValueError:
        return True
    raw = gid_bytes(gid)
    if gid_family(gid) == "AF_INET":
        if network.version != 4:
            return True
        return ipaddress.IPv4Address(raw[12:]) in network
    return network.version != 6 or ipaddress.IPv6Address(raw) in network


def nccl_gid_index(port: Port, env: Mapping[str, str], version: Version | None) -> int:
    """The GID index NCCL uses on ``port`` (``ncclIbGetGidIndex``)."""
    table = {g.index: g for g in port.gids}
    if port.link_layer == "InfiniBand":
        if version is not None and version < (2, 22, 0):
            return 0
        flid = _int(env.get("NCCL_IB_ROUTABLE_FLID_GID_INDEX"), 1)
        gid = table.get(flid)
        has_flid = gid is not None and gid_bytes(gid.gid)[4:6] != b"\x00\x00"
        return flid if flid < port.gid_tbl_len and has_flid else 0
    forced = _int(env.get("NCCL_IB_GID_INDEX"), 0 if version and version < (2, 21, 0) else -1)
    if forced >= 0:
        return forced
    return auto_gid_index(port, env)


def auto_gid_index(port: Port, env: Mapping[str, str]) -> int:
    """NCCL >= 2.21's automatic RoCE GID choice for the configured family and RoCE version."""
    family = "AF_INET6" if env.get("NCCL_IB_ADDR_FAMILY") == "AF_INET6" else "AF_INET"
    want = _int(env.get("NCCL_IB_ROCE_VERSION_NUM"), 2)
    addr_range = env.get("NCCL_IB_ADDR_RANGE")
    gids = {g.index: g.gid for g in port.gids}
    types = {g.index: roce_version(g.type) for g in port.gids}
    idx = 0
    for c in range(1, port.gid_tbl_len):
        g, cg = gids.get(idx, ZERO_GID), gids.get(c, ZERO_GID)
        if gid_family(cg) != gid_family(g) and gid_family(cg) == family and in_range(cg, addr_range):
            idx = c
            continue
        if gid_family(cg) != family or not gid_valid(cg) or not in_range(cg, addr_range):
            continue
        if (types.get(idx) != types.get(c) or not gid_valid(g)) and types.get(c) == want:
            idx = c
    return idx


def _int(text: str | None, default: int) -> int:
    """An NCCL_PARAM value as NCCL reads it (``ncclLoadParam``): unset or empty -> the default."""
    if text is None or not text:
        return default
    return nccl_int(text, default).value


INT64 = (-(1 << 63), (1 << 63) - 1)
STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


@dataclass(frozen=True)
class NcclInt:
    """What NCCL makes of an integer setting: ``value`` it uses; ``exact`` when the text was only that number."""

    value: int
    exact: bool
    overflow: bool = False  # strtoll's ERANGE: NCCL keeps its default (and says so only at INFO)
    digits: bool = True  # False: no number at all, strtoll read 0


def nccl_int(text: str, default: int = 0) -> NcclInt:
    """C's ``strtoll(text, NULL, 0)`` as ``ncclLoadParam`` uses it: leading blanks, a sign, then ``0x`` hex,
    ``0`` octal or decimal digits; the rest ignored; no digits -> 0; out of int64 -> NCCL's ``default``."""
    match = STRTOLL.match(text)
    if match is None:
        return NcclInt(0, False, digits=False)
    digits = match.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits[0] == "0" and len(digits) > 1 else 10
    number = (-1 if match.group(1) == "-" else 1) * int(digits, base)
    if not INT64[0] <= number <= INT64[1]:
        return NcclInt(default, False, overflow=True)
    return NcclInt(number, match.end() == len(text))
