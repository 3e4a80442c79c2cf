"""A GPU as NVML reads it at one moment (``collectors/gpu.py``, through nvidia-ml-py): how busy, at what power, which
processes run on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one look."""

    index: int
    name: str
    util_percent: int  # the share of the last sample period a kernel ran (NVML's "GPU utilisation")
    power_w: float
    power_limit_w: float
    sm_mhz: int
    sm_max_mhz: int
    memory_used: int
    memory_total: int
    pids: tuple[int, ...]  # the compute processes on it
    reasons: tuple[str, ...] = ()  # why its clocks are held down (thermal, power cap, ...), where any
    ecc_uncorrected: int | None = None  # volatile uncorrected ECC errors, where ECC is on

    @property
    def power_share(self) -> float | None:
        return self.power_w / self.power_limit_w if self.power_limit_w > 0 else None


@dataclass(frozen=True)
class GpuLook:
    """Every GPU of the node at one look, or why none could be read (no driver, no nvidia-ml-py)."""

    time: float
    gpus: tuple[GpuReading, ...] = ()
    error: str | None = None
