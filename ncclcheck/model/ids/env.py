"""The ids of ``env``'s checks (analysis/env): the part up to the first dot is the area a check is shown under."""

from __future__ import annotations

from typing import Final

VERSIONS: Final = "versions"
GPUS: Final = "gpus"
IB_DEVICES: Final = "ib.devices"
IB_GID_INDEX: Final = "ib.gid_index"
IB_MEMLOCK: Final = "ib.memlock"
IB_PEERMEM: Final = "ib.peermem"
NET_INTERFACES: Final = "net.interfaces"
NET_SOCKET_IFNAME: Final = "net.socket_ifname"
NET_GLOO: Final = "net.gloo"
RDZV: Final = "rdzv"
HOST_SHM: Final = "host.shm"
HOST_HOSTNAME: Final = "host.hostname"
HOST_PTRACE: Final = "host.ptrace"
HOST_IOMMU: Final = "host.iommu"
ENV_VARS: Final = "env.vars"
ENV_TIMEOUTS: Final = "env.timeouts"
