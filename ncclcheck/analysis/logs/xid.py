"""What NVIDIA's Xid codes mean, for the codes a training job's nodes report.

From NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: the mnemonic,
the description and the "immediate action" of each code, Ampere and newer), read 2026-06 through the copy
leptonai/gpud generates from it (components/accelerator/nvidia/xid/catalog_generated.go). The kind sorts
a code by who is at fault and what it asks for:

* ``MEMORY``, ``NVLINK``, ``GPU``: the GPU, its memory or its links failed (the catalogue asks for a GPU reset,
  a reboot or a workflow): the node is the cause of the job's failure.
* ``PROGRAM``: the program running on the GPU faulted (the catalogue says RESTART_APP, then check the app/CUDA).
* ``NOTICE``: recorded for information or as an echo of another event (the catalogue says IGNORE, or
  "informational only regarding another Xid").

Xid 79 (fallen off the bus) is read by its own rule (``gpu-fallen-off-bus``).
"""

from __future__ import annotations

MEMORY, NVLINK, GPU, PROGRAM, NOTICE = "memory", "nvlink", "gpu", "program", "notice"

XIDS: dict[int, tuple[str, str]] = {
    13: (PROGRAM, "Graphics Engine Exception: a kernel faulted (an out-of-range access, an illegal instruction)"),
    31: (PROGRAM, "GPU memory page fault: a kernel accessed an address it does not own (an illegal memory access)"),
    43: (NOTICE, "GPU stopped processing: the driver stopped a program's work after the program's own fault"),
    45: (
        NOTICE,
        "preemptive cleanup: the driver tore down a process's GPU work after it ended or after an earlier error",
    ),
    46: (GPU, "GPU stopped processing (timeout): the GPU needs a reset"),
    48: (MEMORY, "double-bit ECC error: an uncorrectable error in GPU memory"),
    61: (GPU, "internal micro-controller (PMU) breakpoint or warning"),
    62: (GPU, "internal micro-controller (PMU) halt: the GPU needs a reset"),
    63: (NOTICE, "GPU memory remapping event: a row was marked for remapping at the next GPU reset"),
    64: (MEMORY, "GPU memory remapping failure: a failing memory row could not be remapped"),
    68: (PROGRAM, "video decoder (NVDEC0) exception"),
    69: (PROGRAM, "Graphics Engine class error"),
    74: (NVLINK, "NVLink error: a link to another GPU or an NVSwitch failed"),
    92: (NOTICE, "high single-bit ECC error rate (corrected errors)"),
    94: (MEMORY, "contained uncorrectable ECC error: the processes using that memory were stopped"),
    95: (MEMORY, "uncontained uncorrectable ECC error: every process on the GPU is affected"),
    109: (GPU, "context switch timeout"),
    119: (GPU, "GSP RPC timeout: the GPU System Processor firmware did not answer the driver"),
    120: (GPU, "GSP error: the GPU System Processor firmware failed"),
    136: (NVLINK, "NVLink link training failed"),
    137: (NOTICE, "NVLink privilege error"),
    140: (MEMORY, "unrecovered ECC error"),
    143: (GPU, "GPU initialization failure"),
    144: (NVLINK, "NVLink SAW error"),
    145: (NVLINK, "NVLink RLW error"),
    146: (NVLINK, "NVLink TLW error"),
    147: (NVLINK, "NVLink TREX error"),
    148: (NVLINK, "NVLink NVLPW_CTRL error"),
    149: (NVLINK, "NVLink NETIR error"),
    150: (NVLINK, "NVLink MSE error"),
    154: (NOTICE, "GPU recovery action changed: what an earlier Xid now requires (a reset, a reboot, a drain)"),
}
