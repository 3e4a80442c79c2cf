"""``gpus``: how many GPUs the driver sees, how many CUDA_VISIBLE_DEVICES leaves, and the ranks."""

from __future__ import annotations

from dataclasses import dataclass

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, skip, warn
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.gpu import GpuLook
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes._sysfs import parse_int


@dataclass(frozen=True)
class Visible:
    """What CUDA makes of CUDA_VISIBLE_DEVICES: the devices before the first invalid entry."""

    count: int
    problem: str | None


def visible_devices(value: str | None, total: int) -> Visible:
    """CUDA semantics: only entries before the first invalid one are visible; duplicates flagged."""
    if value is None:
        return Visible(total, None)
    items = [item.strip() for item in value.split(",")] if value.strip() else []
    if not items:
        return Visible(0, "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU")
    seen: list[str] = []
    for item in items:
        if item.startswith(("GPU-", "MIG-")):
            index_ok = True
        else:
            number = parse_int(item)
            index_ok = number is not None and 0 <= number < total
        if not index_ok:
            hidden = f"; the {len(items) - len(seen)} entries from it on are hidden" if seen else ""
            return Visible(len(seen), f"CUDA_VISIBLE_DEVICES entry '{item}' is not a GPU of this node{hidden}")
        if item in seen:
            return Visible(len(seen), f"CUDA_VISIBLE_DEVICES lists '{item}' twice")
        seen.append(item)
    return Visible(len(seen), None)


def check_gpus(snapshot: NodeSnapshot, ctx: Context) -> Check:
    gpu = snapshot.gpu
    details = [f"{g.bdf} {g.model or '(model unknown: driver not loaded)'}" for g in gpu.gpus]
    if not gpu.gpus:
        return skip(env_ids.GPUS, "no NVIDIA GPU on this node: use the gloo backend (ncclcheck smoke --backend gloo)")
    if gpu.driver_loaded is False:
        fix = "install/load the NVIDIA kernel driver (nvidia-smi must work), or pass /proc/driver/nvidia into the container"
        return conclude(
            env_ids.GPUS, "", [fail(f"{len(gpu.gpus)} NVIDIA GPU(s) on PCI but no driver loaded", fix)], details
        )
    total = sum(1 for g in gpu.gpus if g.in_driver) or len(gpu.gpus)
    cvd = ctx.env.get("CUDA_VISIBLE_DEVICES")
    visible = visible_devices(cvd, total)
    issues: list[Issue] = []
    if visible.problem:
        issues.append(
            fail(visible.problem, f"set CUDA_VISIBLE_DEVICES to distinct indices 0..{total - 1} (or unset it)")
        )
    if ctx.env.get("NVIDIA_VISIBLE_DEVICES") in ("void", "none"):
        issues.append(
            fail("NVIDIA_VISIBLE_DEVICES hides every GPU from this container", "start the container with --gpus all")
        )
    issues += _rank_issues(ctx, visible.count)
    if snapshot.nvml is not None:
        details += nvml_details(snapshot.nvml)
        issues += nvml_issues(snapshot.nvml)
    summary = f"{total} GPU(s), {visible.count} visible" + (
        f" via CUDA_VISIBLE_DEVICES={cvd}" if cvd is not None else ""
    )
    if ctx.local_ranks:
        summary += f", {ctx.local_ranks} local rank(s)"
        if ctx.local_ranks < visible.count:
            details.append(f"{visible.count - ctx.local_ranks} visible GPU(s) stay idle")
    return conclude(env_ids.GPUS, summary, issues, details)


def _rank_issues(ctx: Context, visible: int) -> list[Issue]:
    issues: list[Issue] = []
    ranks = ctx.local_ranks
    shared_ok = ctx.env.get("NCCL_MULTI_RANK_GPU_ENABLE") == "1" and (ctx.nccl or (0, 0, 0)) >= (2, 30, 0)
    if ranks and ranks > visible and not shared_ok:
        issues.append(
            fail(
                f"{ranks} local ranks but only {visible} visible GPU(s): ranks would share a GPU"
                " ('Duplicate GPU detected' / 'Multiple Ranks are using the same GPU')",
                f"run {visible} rank(s) per node (--nproc-per-node {visible}) or make more GPUs visible",
            )
        )
    local_rank = parse_int(ctx.env.get("LOCAL_RANK"))
    if local_rank is not None and local_rank >= visible > 0:
        issues.append(
            fail(
                f"LOCAL_RANK={local_rank} but only {visible} GPU(s) visible: set_device(LOCAL_RANK) raises"
                " 'invalid device ordinal'",
                "do not restrict CUDA_VISIBLE_DEVICES per rank when the script calls set_device(LOCAL_RANK)",
            )
        )
    return issues


SLOWDOWNS = frozenset({"hardware slowdown", "hardware thermal slowdown", "software thermal slowdown", "power brake"})


def nvml_details(look: GpuLook) -> list[str]:
    """Each GPU as NVML reads it now (what ``watch`` reads during a hang), or why it could not be read."""
    if look.error is not None:
        return [f"NVML: {look.error}"]
    out = []
    for g in look.gpus:
        share = g.power_share
        power = f", {g.power_w:.0f} W of {g.power_limit_w:.0f} W" if share is not None else ""
        clocks = f", SM {g.sm_mhz}/{g.sm_max_mhz} MHz" if g.sm_max_mhz else ""
        held = f" (held down: {', '.join(g.reasons)})" if g.reasons else ""
        used = f", memory {g.memory_used >> 20}/{g.memory_total >> 20} MiB"
        procs = f", {len(g.pids)} process(es)" if g.pids else ""
        out.append(f"GPU {g.index} {g.name}: {g.util_percent} % busy{power}{clocks}{held}{used}{procs}")
    return out


def nvml_issues(look: GpuLook) -> list[Issue]:
    """Uncorrected ECC errors (the GPU's memory is not to be trusted) and clocks held down by heat or a power brake."""
    issues = []
    for g in look.gpus:
        if g.ecc_uncorrected:
            issues.append(
                fail(
                    f"GPU {g.index} reports {g.ecc_uncorrected} uncorrected ECC error(s) since its driver loaded",
                    "drain the node: the GPU needs a reset (nvidia-smi -r when idle) and, if they come back, "
                    "replacement; `nvidia-smi -q -d ECC,PAGE_RETIREMENT` and `dmesg | grep Xid` show the history",
                )
            )
        slow = sorted(set(g.reasons) & SLOWDOWNS)
        if slow:
            issues.append(
                warn(
                    f"GPU {g.index}'s clocks are held down ({', '.join(slow)}): a rank on it runs slower than its peers",
                    "check its cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); every rank waits "
                    "for the slowest GPU",
                )
            )
    return issues
