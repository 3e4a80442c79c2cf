"""What each rank's GPU says about a stall: a kernel spinning in place (busy at low power), compute, an idle GPU; the
rank whose GPU is idle while the others' spin never launched the collective. Readings are written here in NVML's
units (this machine has no GPU); the collector's own no-driver path is read for real."""

from __future__ import annotations

from ncclcheck.analysis.gpu import activity, judge, of_ranks
from ncclcheck.collectors.gpu import look
from ncclcheck.model.gpu import GpuLook, GpuReading

PIDS = {4000 + r: r for r in range(4)}


def gpu(index: int, util: int, power_w: float, *pids: int) -> GpuReading:
    return GpuReading(index, "NVIDIA H100 80GB HBM3", util, power_w, 700.0, 1980, 1980, 10 << 30, 80 << 30, pids)


def test_activity_by_utilisation_and_power() -> None:
    assert activity(gpu(0, 100, 160.0)) == "spinning"  # NCCL's kernel waiting for data: busy at ~23 % power
    assert activity(gpu(0, 99, 610.0)) == "computing"
    assert activity(gpu(0, 0, 70.0)) == "idle"
    assert activity(gpu(0, 40, 300.0)) == "busy"


def test_the_rank_whose_gpu_is_idle_while_the_others_spin_never_launched_it() -> None:
    now = GpuLook(1.0, (gpu(0, 100, 150, 4000), gpu(1, 100, 160, 4001), gpu(2, 0, 70, 4002), gpu(3, 99, 155, 4003)))
    found = judge(now, PIDS, (0, 1, 2, 3))
    assert [(f.id, f.culprits) for f in found] == [("gpu-idle-rank", (2,))]
    assert "rank 2's GPU is idle while the other ranks' GPUs spin in place" in found[0].message
    assert "rank 0: GPU 0 spinning (100 % at 21% of its power limit)" in found[0].message


def test_every_gpu_spinning_is_a_wait_for_data_naming_nobody() -> None:
    now = GpuLook(1.0, tuple(gpu(i, 100, 150, 4000 + i) for i in range(4)))
    found = judge(now, PIDS, (0, 1, 2, 3))
    assert [(f.id, f.severity, f.culprits) for f in found] == [("gpu-spinning", "warning", ())]


def test_must_not_shared_gpus_unseen_ranks_compute_or_a_tie_blame_anyone() -> None:
    shared = GpuLook(1.0, (gpu(0, 0, 70, 4000, 4001), gpu(1, 100, 150, 4002)))
    assert of_ranks(shared, PIDS) == {2: shared.gpus[1]} and judge(shared, PIDS, (0, 1, 2)) == ()
    unseen = GpuLook(1.0, (gpu(0, 0, 70, 4000), gpu(1, 100, 150, 4001)))
    assert judge(unseen, PIDS, (0, 1, 2)) == ()  # rank 2's GPU not seen: not judged by the GPUs
    computing = GpuLook(1.0, (gpu(0, 0, 70, 4000), gpu(1, 99, 650, 4001), gpu(2, 100, 150, 4002)))
    assert judge(computing, PIDS, (0, 1, 2)) == ()  # one computes: not the shape of a collective's wait
    tie = GpuLook(1.0, (gpu(0, 0, 70, 4000), gpu(1, 100, 150, 4001)))
    assert judge(tie, PIDS, (0, 1)) == ()


def test_without_a_driver_the_look_says_why_and_never_raises() -> None:
    got = look()
    assert got.gpus == () and got.error is not None
    assert "NVIDIA driver" in got.error or "nvidia-ml-py" in got.error
