"""The node's GPUs through NVML (nvidia-ml-py, NVIDIA's own binding; no torch, no CUDA context): utilisation, power
against its limit, SM clocks and why they are held down, memory, the compute processes, uncorrected ECC errors.
Without a driver or the binding: a look that says why, never an exception."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ncclcheck.model.gpu import GpuLook, GpuReading

# nvmlClocksEventReason* bits (nvml.h), in the words users know them by
REASONS = (
    (0x0000000000000002, "application clocks setting"),
    (0x0000000000000004, "software power cap"),
    (0x0000000000000008, "hardware slowdown"),
    (0x0000000000000020, "software thermal slowdown"),
    (0x0000000000000040, "hardware thermal slowdown"),
    (0x0000000000000080, "power brake"),
)


def look() -> GpuLook:
    """Every GPU now, or why none."""
    now = time.time()
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        return GpuLook(now, error="nvidia-ml-py is not installed (pip install nvidia-ml-py): GPUs not read")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuLook(now, error=f"no NVIDIA driver to ask (NVML: {exc})")
    try:
        return GpuLook(now, tuple(_reading(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())))
    except pynvml.NVMLError as exc:
        return GpuLook(now, error=f"NVML could not read the GPUs: {exc}")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _reading(nvml: Any, index: int) -> GpuReading:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    util = nvml.nvmlDeviceGetUtilizationRates(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    pids = tuple(p.pid for p in _optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle), []))
    bits = int(_optional(lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle), 0))
    ecc = _optional(
        lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        ),
        None,
    )
    return GpuReading(
        index,
        str(nvml.nvmlDeviceGetName(handle)),
        int(util.gpu),
        _optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle), 0) / 1000,
        _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), 0) / 1000,
        int(_optional(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM), 0)),
        int(_optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM), 0)),
        int(memory.used),
        int(memory.total),
        pids,
        tuple(words for bit, words in REASONS if bits & bit),
        None if ecc is None else int(ecc),
    )


def _optional(read: Any, default: Any) -> Any:
    """A value some GPUs do not report (power on some boards, ECC where it is off), or an older binding lacks the
    call for: the default then."""
    import pynvml

    try:
        return read()
    except (pynvml.NVMLError, AttributeError):
        return default
