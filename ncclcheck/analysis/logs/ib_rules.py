"""Rules for NCCL's InfiniBand lines, built from libibverbs' tables (ib_verbs.py): a failed work completion, by its
status's number or name, and an HCA's async event, by its words or number.

NCCL's formats (src/transport/net_ib.cc; net_ib/common.cc and p2p.cc since 2.29), read at each release tag:
completions "Got completion with error %d, ..." (2.3-2.9), "Got completion from peer %s with error %d, ..."
(2.10-2.19), "... with status=%d opcode=%d ..." (2.20-), "... with status=%s(%d) ..." (2.28.7-, the IBV_WC_ name);
async events "NET/IB : Got async event : %s" (2.3-2.19), "NET/IB : %s:%d Got async event : %s" (2.20-2.22), then
by kind: "%s:%d async fatal event[ on CQ|QP|SRQ (%p)...]: %s", "%s:%d Got async error event: %s" (2.23-2.28),
"%s:%d Got non-fatal async event: %s(%d)" (2.29-), "%s:%d GID table changed" (2.28-) and
"%s:%d unknown event type (%d)" (2.23-).
"""

from __future__ import annotations

import re

from ncclcheck.analysis.logs.ib_verbs import (
    ASYNC_EVENTS,
    BENIGN,
    FAULT,
    HCA_FIX,
    NOTICE,
    WC_ECHOES,
    WC_FINDINGS,
    WC_STATUSES,
    AsyncEvent,
    WcStatus,
)
from ncclcheck.analysis.logs.rule import Rule, make_rule
from ncclcheck.model.findings import Severity

COMPLETION = r"Got completion (?:from peer (?P<peer>\S+?)<\d+> )?with (?:error |status=)"
WHERE = r"NET/IB ?: (?:(?P<where>[\w.-]+:\d+) )?"  # the HCA and port (2.20 and later)
NAMED = r"(?:Got (?:non-fatal )?async (?:error )?event ?: ?|async fatal event(?: on (?:CQ|QP|SRQ)[^:]*)?: )"
KNOWN = "(?:" + "|".join(str(e.number) for e in ASYNC_EVENTS) + ")"
EVENT_ID = {BENIGN: "ib-sm-event", NOTICE: "ib-async-notice", FAULT: "ib-async-fault"}
EVENT_SEVERITY: dict[str, Severity] = {BENIGN: "info", NOTICE: "warning", FAULT: "error"}
EVENT_FIX = {
    BENIGN: "nothing, unless it repeats or completion errors follow it: then read the subnet manager's log (opensm, UFM)",
    NOTICE: "nothing on its own (NCCL's traffic does not depend on it); if errors follow it, check that port"
    " (`ibstat`, `ibv_devinfo`) and the HCA's driver (`dmesg`)",
    FAULT: "a fault of that HCA port or its link, not of the job: the ranks using it fail and the other ranks' errors"
    " are echoes; check `ibstat` on the node (State, Physical state), the cable and the switch port, `dmesg` for mlx5"
    " errors and the subnet manager's log; drain the node, or leave the port out (NCCL_IB_HCA) until it is fixed",
}


def _completion(status: WcStatus) -> Rule:
    return make_rule(
        WC_FINDINGS.get(status.number, "ib-completion-error"),
        "error",
        "Got completion",
        rf"{COMPLETION}(?:{status.name}\()?{status.number}\b",
        f"IB completion failed with {status.name} ({status.number}): {status.meaning} (peer {{peer}})",
        status.fix,
        status.number in WC_ECHOES,
    )


def _event(event: AsyncEvent) -> Rule:
    named = f"{NAMED}{re.escape(event.words)}(?:\\(\\d+\\))?\\s*$|" if event.words else ""
    what = f"'{event.words}'" if event.words else f"{event.number}"
    return make_rule(
        EVENT_ID[event.kind],
        EVENT_SEVERITY[event.kind],
        "NET/IB",
        rf"{WHERE}(?:{named}unknown event type \({event.number}\))",
        f"IB async event {what} on an HCA port ({{where}}): {event.meaning}",
        EVENT_FIX[event.kind],
    )


IB_RULES: tuple[Rule, ...] = (
    *(_completion(s) for s in WC_STATUSES),
    make_rule(  # a number libibverbs does not define (NCCL prints UNKNOWN_STATUS(n) for it since 2.28.7)
        "ib-completion-error", "error", "Got completion",
        rf"{COMPLETION}(?:\w+\()?(?P<status>2[2-9]|[3-9]\d|\d{{3,}})\b",
        "IB completion failed with status {status}, which libibverbs does not define (peer {peer})",
        HCA_FIX,
    ),
    *(_event(e) for e in ASYNC_EVENTS),
    make_rule(  # a libibverbs that does not know the event's number names it "unknown" (NCCL before 2.23)
        "ib-async-notice", "warning", "NET/IB",
        rf"{WHERE}{NAMED}unknown\s*$",
        "IB async event the HCA's libibverbs cannot name, on an HCA port ({where})",
        EVENT_FIX[NOTICE],
    ),
    make_rule(  # a number neither libibverbs nor MLNX_OFED defines (NCCL 2.23 and later print it)
        "ib-async-notice", "warning", "unknown event type",
        rf"{WHERE}unknown event type \((?!{KNOWN}\))(?P<event>\d+)\)",
        "IB async event {event}, which libibverbs does not define, on an HCA port ({where})",
        EVENT_FIX[NOTICE],
    ),
    make_rule(
        "ib-sm-event", "info", "GID table changed",
        rf"{WHERE}GID table changed",
        "IB async event 'GID table change' on an HCA port ({where}): the port's GID table changed (an address added"
        " or removed)",
        EVENT_FIX[BENIGN],
    ),
)  # fmt: skip
