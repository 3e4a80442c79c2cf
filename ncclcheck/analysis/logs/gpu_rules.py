"""Rules for a GPU that failed under the job: the kernel's Xid and PCIe AER lines, and CUDA's sticky errors.

A GPU fault is where a job's failure started: the rank on that GPU dies or hangs, and every other rank's timeout
or NCCL error is an echo of it. ``GPU_FAULT_IDS`` are the findings the verdict prefers for that reason.
The kernel lines come as dmesg prints them (``[ 1843.30] NVRM: ...``) or as journald does (``host kernel: ...``);
the rules search, so whatever is before the message does not matter.
"""

from __future__ import annotations

from ncclcheck.analysis.logs.rule import Rule, make_rule
from ncclcheck.analysis.logs.xid import GPU, MEMORY, NOTICE, NVLINK, PROGRAM, XIDS
from ncclcheck.model.findings import Severity
from ncclcheck.model.ids import logs as logs_ids

# NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s (src/nvidia/src/kernel/gpu/rc/kernel_rc.c; a MIG GPU adds
# " GPU-I:%02u GPU-CI:%02u" inside the parenthesis; old drivers print no "PCI:" and no pid/name)
XID_HEAD = r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)\s]*)[^)]*\): "
XID_TAIL = r"\b,? ?(?:pid=[^,]*, name=[^,]*, )?(?P<detail>.{1,160})"
PCI = r"(?P<dev>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"

HARDWARE_FIX = (
    "a fault of this GPU, not of the job: drain the node; `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` on it;"
    " reset the GPU (`nvidia-smi -r`) or reboot as NVIDIA's Xid catalogue says for this code, and replace the GPU if"
    " it recurs; the other ranks' timeouts and NCCL errors are echoes of this GPU failing"
)
NVLINK_FIX = (
    "a fault of the NVLink fabric, not of the job: NVLink collectives on this node hang or fail; drain the node, check"
    " `nvidia-smi nvlink -s` / `nvidia-smi nvlink -e` and the fabric manager (`systemctl status nvidia-fabricmanager`),"
    " reset the GPUs or reboot, and replace the part if the link keeps failing"
)
PROGRAM_FIX = (
    "the program running on the GPU faulted (NVIDIA's catalogue: restart the app, then check the app and CUDA): rerun"
    " with CUDA_LAUNCH_BLOCKING=1 (the traceback then names the kernel) or under compute-sanitizer; a custom kernel"
    " or a custom all-reduce (vLLM, TensorRT-LLM) is a usual suspect; if it follows a hardware Xid, that one is the cause"
)
NOTICE_FIX = (
    "nothing on its own: it records or follows another event; read the Xid or error before it (a memory row remap"
    " takes effect at the next GPU reset; many single-bit errors predict a failing GPU)"
)
UNKNOWN_FIX = (
    "look the code up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors); until then treat it as a possible"
    " GPU fault: `nvidia-smi -q` on the node, and drain it if the job failed there"
)
BUS_FIX = (
    "hardware or platform, not the job: the GPU's PCIe link dropped (power, overheating, a riser or slot, a failing"
    " GPU); drain the node, read the PCIe AER lines before it in dmesg, reboot (a GPU reset rarely brings it back),"
    " replace the part if it recurs; every other rank's error is an echo of this GPU leaving"
)
AER_FIX = (
    "a PCIe link fault on this node (the port named and the GPU or NIC behind it, `lspci -t`): drain it; reseat or"
    " replace the riser, cable or card; check power and cooling; a GPU behind it often falls off the bus next (Xid 79)"
)
STICKY = (
    "a sticky error: every later CUDA call in the process fails, so its NCCL watchdog and the other ranks fail after it"
)

_FIX = {MEMORY: HARDWARE_FIX, GPU: HARDWARE_FIX, NVLINK: NVLINK_FIX, PROGRAM: PROGRAM_FIX, NOTICE: NOTICE_FIX}
_ID = {MEMORY: "gpu-xid", GPU: "gpu-xid", NVLINK: "gpu-xid", PROGRAM: "gpu-xid-program", NOTICE: "gpu-xid-notice"}
_SEVERITY: dict[str, Severity] = {NOTICE: "warning"}


def _xid(code: int, kind: str, meaning: str) -> Rule:
    return make_rule(
        _ID[kind],
        _SEVERITY.get(kind, "error"),
        "NVRM: Xid",
        XID_HEAD + str(code) + XID_TAIL,
        f"Xid {code} on GPU {{pci}}: {meaning} ({{detail}})",
        _FIX[kind],
    )


_KNOWN = "|".join(str(code) for code in (*XIDS, 79))
XID_RULES = (
    *(_xid(code, kind, meaning) for code, (kind, meaning) in XIDS.items()),
    make_rule(
        "gpu-xid-unknown", "error", "NVRM: Xid", XID_HEAD + rf"(?!(?:{_KNOWN})\b)(?P<code>\d+)" + XID_TAIL,
        "Xid {code} on GPU {pci}: a GPU event ncclcheck has no meaning for ({detail}): see NVIDIA's Xid catalogue",
        UNKNOWN_FIX,
    ),
)  # fmt: skip
# One rule a few lines, its fields in make_rule's order (fmt: skip keeps the table a table).
GPU_RULES: tuple[Rule, ...] = (
    *XID_RULES,
    make_rule(
        "gpu-fallen-off-bus", "error", "NVRM: Xid",
        XID_HEAD + r"79\b",
        "GPU {pci} fell off the PCIe bus (Xid 79): the driver can no longer reach it",
        BUS_FIX,
    ),
    make_rule(  # NV_DEV_PRINTF's "NVRM: GPU %04x:%02x:%02x.%x: " + "GPU has fallen off the bus." (osinit.c); older: "GPU at"
        "gpu-fallen-off-bus", "error", "fallen off the bus",
        r"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>[0-9a-fA-F:.]+?):? (?:GPU )?has fallen off the bus",
        "GPU {pci} fell off the PCIe bus: the driver can no longer reach it",
        BUS_FIX,
    ),
    make_rule(  # osinit.c: "NVRM: The NVIDIA GPU %04x:%02x:%02x.%x\nNVRM: (PCI ID: ...) installed in this system has\nNVRM: fallen off..."
        "gpu-fallen-off-bus", "error", "fallen off the bus",
        r"The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)\b.*?fallen off the bus and is not responding",
        "GPU {pci} fell off the PCIe bus and does not respond (no Xid printed): the driver can no longer reach it",
        BUS_FIX,
    ),
    make_rule(  # the same message's last line alone (dmesg prints it on three lines): the GPU is named two lines up
        "gpu-fallen-off-bus", "error", "fallen off the bus",
        r"^(?!.*The NVIDIA GPU).*?fallen off the bus and is not responding",
        "a GPU fell off the PCIe bus and does not respond (no Xid printed; dmesg names it on the lines before):"
        " the driver can no longer reach it",
        BUS_FIX,
    ),
    make_rule(  # nv.c, every driver since the 2000s: "NVRM: The NVIDIA probe routine failed for %d device(s)."
        "gpu-probe-failed", "error", "NVIDIA probe routine failed",
        r"The NVIDIA probe routine failed for (?P<n>\d+) device",
        "the NVIDIA driver could not initialise {n} GPU(s) on this node (its probe failed): the kernel's lines before"
        " this one name the GPU and why",
        "drain the node: a GPU that fell off the bus needs a reset or a reseat; an unsupported GPU or a bad PCI BAR"
        " (the lines before say which) needs another driver or a BIOS fix; `nvidia-smi` then lists every GPU again",
    ),
    make_rule(
        "gpu-ecc-error", "error", "uncorrectable ECC error",
        r"uncorrectable ECC error encountered",
        "an uncorrectable ECC error in this GPU's memory (CUDA error 214): " + STICKY,
        HARDWARE_FIX,
    ),
    make_rule(
        "cuda-illegal-address", "error", "illegal memory access",
        r"an illegal memory access was encountered",
        "CUDA error 700: a kernel on this GPU accessed an illegal address; " + STICKY,
        "a kernel bug or memory corruption, not the network: rerun with CUDA_LAUNCH_BLOCKING=1 (the traceback then"
        " names the kernel) or under compute-sanitizer; `dmesg` on the node: Xid 13/31 = the program, Xid 48/94/95 ="
        " the GPU's memory; a custom all-reduce (vLLM, TensorRT-LLM) is a usual suspect: disable it as a test",
    ),
    make_rule(
        "cuda-launch-failure", "error", "unspecified launch failure",
        r"unspecified launch failure",
        "CUDA error 719 (unspecified launch failure): a kernel on this GPU crashed; " + STICKY,
        "`dmesg` on the node (an Xid names a GPU fault); rerun with CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer"
        " to find the kernel; if it follows a hardware Xid, drain the node",
    ),
    make_rule(  # cudaErrorLaunchTimeout (702): "the launch timed out and was terminated"
        logs_ids.CUDA_LAUNCH_TIMEOUT, "error", "the launch timed out and was terminated",
        r"the launch timed out and was terminated",
        "CUDA error 702: a kernel on this GPU ran past the driver's watchdog and was ended; " + STICKY,
        "a GPU that also drives a display kills long kernels (run headless, or without X on that GPU); on a compute"
        " GPU a kernel that never ends (a hang, a spin on a flag another rank never set): `dmesg` for an Xid, and"
        " rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel",
    ),
    # drivers/pci/pcie/aer.c: "PCIe Bus Error: severity=%s, type=%s, (%s)" (id=%04x(%s) before 5.x); the severities
    # "Uncorrected (Fatal)", "Uncorrected (Non-Fatal)", "Corrected" ("Uncorrectable"/"Correctable" in newer kernels)
    make_rule(
        "pcie-aer-uncorrected", "error", "PCIe Bus Error: severity=Uncorrect",
        PCI + r"?:? ?PCIe Bus Error: severity=Uncorrect(?:ed|able) \((?P<sev>Non-Fatal|Fatal)\), type=(?P<type>[^,]+)",
        "uncorrected PCIe error ({sev}, {type}) at {dev}: the link to the device behind it failed",
        AER_FIX,
    ),
    make_rule(
        "pcie-aer-uncorrected", "error", "AER: Uncorrect",
        PCI + r"?:? ?AER: Uncorrect(?:ed|able) \((?P<sev>Non-Fatal|Fatal)\) error (?:message )?received",
        "uncorrected PCIe error ({sev}) reported at {dev}: the link to the device behind it failed",
        AER_FIX,
    ),
    make_rule(
        "pcie-aer-uncorrected", "error", "Surprise Down Error",
        PCI + r"?:?\s+\[\s*5\] Surprise Down Error",
        "the PCIe link at {dev} went down unexpectedly (Surprise Down): the device behind it dropped off",
        AER_FIX,
    ),
    make_rule(
        "pcie-aer-corrected", "warning", "PCIe Bus Error: severity=Correct",
        PCI + r"?:? ?PCIe Bus Error: severity=Correct(?:ed|able), type=(?P<type>[^,]+)",
        "corrected PCIe error ({type}) at {dev}: the link repaired it",
        "harmless alone; many of them, or an uncorrected error next, mean a marginal slot, riser or cable: watch"
        " `dmesg` and the AER counters in /sys/bus/pci/devices/*/aer_dev_correctable",
    ),
    make_rule(
        "pcie-aer-corrected", "warning", "AER: Correct",
        PCI + r"?:? ?AER: Correct(?:ed|able) error (?:message )?received",
        "corrected PCIe error reported at {dev}: the link repaired it",
        "harmless alone; many of them, or an uncorrected error next, mean a marginal slot, riser or cable: watch"
        " `dmesg` and the AER counters in /sys/bus/pci/devices/*/aer_dev_correctable",
    ),
)  # fmt: skip
GPU_FAULT_IDS = frozenset(
    {
        logs_ids.GPU_XID,
        logs_ids.GPU_XID_PROGRAM,
        logs_ids.GPU_FALLEN_OFF_BUS,
        logs_ids.GPU_PROBE_FAILED,
        logs_ids.GPU_ECC_ERROR,
        logs_ids.CUDA_ILLEGAL_ADDRESS,
        logs_ids.CUDA_LAUNCH_FAILURE,
        logs_ids.CUDA_LAUNCH_TIMEOUT,
        logs_ids.PCIE_AER_UNCORRECTED,
    }
)
