"""InfiniBand's own vocabulary as NCCL reports it: the status a failed work completion carries (``ibv_wc_status``)
and the asynchronous events of an HCA (``ibv_event_type``), each with what it means and what to do.

One table each, one home: the rules that read NCCL's lines (ib_rules.py) are built from them. Numbers and names
are libibverbs' (rdma-core libibverbs/verbs.h; NCCL's own copy is src/include/ibvcore.h), the event wording its
``ibv_event_type_str`` (libibverbs/enum_strs.c), which NCCL prints as is.
"""

from __future__ import annotations

from dataclasses import dataclass

BENIGN, NOTICE, FAULT = "benign", "notice", "fault"  # an async event's kind


@dataclass(frozen=True)
class WcStatus:
    """One ``ibv_wc_status``: its number, its IBV_WC_ name, what it means for NCCL's traffic and its fix."""

    number: int
    name: str
    meaning: str
    fix: str


@dataclass(frozen=True)
class AsyncEvent:
    """One ``ibv_event_type``: its number, the words ``ibv_event_type_str`` gives it (None: a libibverbs too old to
    name it prints "unknown"), its kind (benign, notice, fault) and what it means."""

    number: int
    words: str | None
    kind: str
    meaning: str


GID_FIX = (
    "on RoCE set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID (`ncclcheck env` shows it), NCCL_CROSS_NIC=0 on"
    " rail-optimised fabrics; test the path with ib_write_bw; check switch PFC/ECN and link flaps; a congested"
    " fabric may need a larger NCCL_IB_TIMEOUT"
)
GDR_FIX = (
    "usually PCIe ACS or the IOMMU breaking GPUDirect RDMA: disable ACS on the switches, boot with iommu=pt;"
    " confirm with NCCL_NET_GDR_LEVEL=0 (works, slower)"
)
FLUSH_FIX = "a consequence: find the first completion error (12 or 4) on this or the peer node"
PEER_FIX = (
    "read the peer's log first (a peer that died or stopped posting buffers makes this); if the peer is alive,"
    " check GPUDirect RDMA on it (nvidia-peermem or DMA-BUF loaded, PCIe ACS off) and that every node runs the same"
    " NCCL and the same net plugin"
)
HCA_FIX = (
    "a fault of the HCA or its driver, not of the job: drain the node, read `dmesg` for mlx5/HCA errors, check"
    " `ibv_devinfo` and the firmware (`mlxfwmanager`), and update MLNX_OFED/DOCA and the firmware if it recurs"
)
RD_FIX = (
    "NCCL uses reliable-connected queue pairs only, which never report this status: the HCA driver or a net plugin"
    " is misbehaving; update the driver and firmware, and try without the plugin (NCCL_NET_PLUGIN=none)"
)
# ibv_wc_status, in libibverbs' order (0 is IBV_WC_SUCCESS, never an error)
WC_STATUSES: tuple[WcStatus, ...] = (
    WcStatus(1, "IBV_WC_LOC_LEN_ERR", "local length error: a message was longer than the buffer posted for it",
             "the ranks disagree on a message's size: the same NCCL build and net plugin on every node; if they"
             " match, a driver fault: " + HCA_FIX),
    WcStatus(2, "IBV_WC_LOC_QP_OP_ERR", "local QP operation error: this NIC's queue pair got a work request it"
             " cannot run", HCA_FIX),
    WcStatus(3, "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error (a reliable-datagram status)", RD_FIX),
    WcStatus(4, "IBV_WC_LOC_PROT_ERR", "local protection error: GPUDirect RDMA writes are rejected", GDR_FIX),
    WcStatus(5, "IBV_WC_WR_FLUSH_ERR", "work requests flushed: the queue pair had already failed", FLUSH_FIX),
    WcStatus(6, "IBV_WC_MW_BIND_ERR", "memory window bind error: a memory registration operation failed", HCA_FIX),
    WcStatus(7, "IBV_WC_BAD_RESP_ERR", "bad response error: the peer's NIC answered with an unexpected packet",
             "a fabric or peer-NIC fault: check the link between the two nodes (`ibdiagnet`, the switch counters,"
             " `ibv_devinfo` on both), and that both run the same NCCL"),
    WcStatus(8, "IBV_WC_LOC_ACCESS_ERR", "local access error: this NIC could not access a local buffer (its"
             " registration was invalid or freed)",
             "GPUDirect RDMA on this node: nvidia-peermem or DMA-BUF loaded, PCIe ACS off; a buffer freed while"
             " NCCL still used it (a communicator destroyed too early) gives it too; " + HCA_FIX),
    WcStatus(9, "IBV_WC_REM_INV_REQ_ERR", "remote invalid request: the peer's NIC rejected the request (a length"
             " beyond its buffer, an operation its queue pair does not allow)", PEER_FIX),
    WcStatus(10, "IBV_WC_REM_ACCESS_ERR", "remote access error: the peer's NIC refused the RDMA access to its"
             " memory (its key invalid, or its buffer deregistered)", PEER_FIX),
    WcStatus(11, "IBV_WC_REM_OP_ERR", "remote operation error: the peer's NIC could not complete the operation",
             PEER_FIX),
    WcStatus(12, "IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded: the remote NIC never acknowledged",
             GID_FIX),
    WcStatus(13, "IBV_WC_RNR_RETRY_EXC_ERR", "receiver-not-ready retry counter exceeded: the peer posted no"
             " receive buffer in time (it stalled, hung or died)", PEER_FIX),
    WcStatus(14, "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation (a reliable-datagram status)", RD_FIX),
    WcStatus(15, "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request (a reliable-datagram status)", RD_FIX),
    WcStatus(16, "IBV_WC_REM_ABORT_ERR", "remote aborted: the peer's NIC aborted the operation", PEER_FIX),
    WcStatus(17, "IBV_WC_INV_EECN_ERR", "invalid EE context number (a reliable-datagram status)", RD_FIX),
    WcStatus(18, "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state (a reliable-datagram status)", RD_FIX),
    WcStatus(19, "IBV_WC_FATAL_ERR", "fatal error: this HCA hit a fatal error", HCA_FIX),
    WcStatus(20, "IBV_WC_RESP_TIMEOUT_ERR", "response timeout: the peer's NIC never answered", GID_FIX),
    WcStatus(21, "IBV_WC_GENERAL_ERR", "general error: the NIC reported an error no other status covers", HCA_FIX),
)  # fmt: skip
# The findings of the statuses the job's failure is usually read from; every other status is ib-completion-error
WC_FINDINGS = {12: "ib-retry-exceeded", 4: "ib-local-protection", 5: "ib-wr-flush"}
WC_ECHOES = frozenset({5})  # a flushed queue pair: an echo of the completion error that broke it

# ibv_event_type, in libibverbs' order; DCT events (32-34) are MLNX_OFED's experimental ones
ASYNC_EVENTS: tuple[AsyncEvent, ...] = (
    AsyncEvent(0, "CQ error", FAULT, "a completion queue overran or failed: NCCL's connections on it are lost"),
    AsyncEvent(1, "local work queue catastrophic error", FAULT, "a queue pair failed: its connection is lost"),
    AsyncEvent(2, "invalid request local work queue error", FAULT, "a queue pair got an invalid request from the"
               " peer: its connection is lost"),
    AsyncEvent(3, "local access violation work queue error", FAULT, "a queue pair's peer broke a memory access"
               " rule: its connection is lost"),
    AsyncEvent(4, "communication established", BENIGN, "a queue pair received its first message"),
    AsyncEvent(5, "send queue drained", NOTICE, "a queue pair's send queue drained (NCCL never asks for it)"),
    AsyncEvent(6, "path migrated", NOTICE, "a queue pair moved to its alternate path (NCCL never sets one)"),
    AsyncEvent(7, "path migration request error", FAULT, "a queue pair's path failed and could not migrate"),
    AsyncEvent(8, "local catastrophic error", FAULT, "the HCA itself failed: every connection through it is lost"),
    AsyncEvent(9, "port active", BENIGN, "the port came up (again)"),
    AsyncEvent(10, "port error", FAULT, "the port went down (its link dropped): connections through it fail"),
    AsyncEvent(11, "LID change", BENIGN, "the subnet manager gave the port a new LID"),
    AsyncEvent(12, "P_Key change", BENIGN, "the subnet manager changed the port's partition keys"),
    AsyncEvent(13, "SM change", BENIGN, "the subnet manager moved (a failover or restart)"),
    AsyncEvent(14, "SRQ catastrophic error", FAULT, "a shared receive queue failed"),
    AsyncEvent(15, "SRQ limit reached", NOTICE, "a shared receive queue ran low (NCCL uses none)"),
    AsyncEvent(16, "last WQE reached", NOTICE, "a queue pair on a shared receive queue drained (NCCL uses none)"),
    AsyncEvent(17, "client reregistration", BENIGN, "the subnet manager asked the port to re-register (an SM"
               " restart or failover)"),
    AsyncEvent(18, "GID table change", BENIGN, "the port's GID table changed (an address added or removed)"),
    AsyncEvent(19, "WQ fatal", FAULT, "a work queue failed: its connection is lost"),
    AsyncEvent(20, None, NOTICE, "the port's link speed changed: a link that renegotiated down runs slower"),
    AsyncEvent(32, None, FAULT, "a DC target saw a key violation"),
    AsyncEvent(33, None, FAULT, "a DC target saw an access error"),
    AsyncEvent(34, None, FAULT, "a DC target saw an invalid request"),
)  # fmt: skip
