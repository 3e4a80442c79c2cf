"""``env.timeouts``: the timeouts a hung or broken job meets, and where one fires before another it depends on.

Defaults, from the sources that read them (the tests name each):
- the process-group timeout, 10 min for NCCL (``kProcessGroupNCCLDefaultTimeout``, ProcessGroupNCCL.hpp); set in
  code (``init_process_group(timeout=...)``), never by a variable, so the default is assumed and said;
- TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, 480 s (``HeartbeatMonitor``, ProcessGroupNCCL.cpp);
- TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC / TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, 15000 ms; after a timeout the watchdog
  sleeps four times it before it raises (``getDumpTimeout() * 4``, ProcessGroupNCCL.cpp);
- NCCL_IB_TIMEOUT 20 and NCCL_IB_RETRY_CNT 7 (``NCCL_PARAM``, src/transport/net_ib/connect.cc): a dead link is
  reported after about 4.096 us x 2^timeout x (retries + 1);
- torchrun's and SLURM's graces after a stop signal: analysis/env/grace.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.grace import grace_details, grace_issues, read_grace
from ncclcheck.analysis.env.verdict import Issue, conclude, warn
from ncclcheck.analysis.nccl_rules import nccl_int
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes._sysfs import parse_int

PG_TIMEOUT_S = 600.0
HEARTBEAT_S = 480
DUMP_WAIT_MS = 15000
IB_TIMEOUT, IB_RETRY_CNT = 20, 7
IB_UNIT_S = 4.096e-6
DUMP_WAIT_NAMES = ("TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC")


@dataclass(frozen=True)
class Timeouts:
    """The timeouts in seconds, each with where its value came from (a variable, or "default")."""

    heartbeat_s: float
    dump_wait_s: float
    ib_error_s: float
    sources: Mapping[str, str]


def read_timeouts(env: Mapping[str, str]) -> Timeouts:
    """The values PyTorch and NCCL would use: NCCL's as strtoll reads them, PyTorch's default for what it cannot
    parse (env.vars says what is wrong with either)."""
    sources: dict[str, str] = {}
    heartbeat = _torch_int(env, ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",), HEARTBEAT_S, sources)
    dump_ms = _torch_int(env, DUMP_WAIT_NAMES, DUMP_WAIT_MS, sources)
    ib_timeout = _nccl_param(env, "NCCL_IB_TIMEOUT", IB_TIMEOUT, sources)
    retries = _nccl_param(env, "NCCL_IB_RETRY_CNT", IB_RETRY_CNT, sources)
    # An IB QP timeout of 0 means wait forever (InfiniBand spec), so the link's death is never reported.
    ib_error = IB_UNIT_S * 2 ** min(ib_timeout, 31) * (max(retries, 0) + 1) if ib_timeout > 0 else math.inf
    return Timeouts(float(heartbeat), dump_ms / 1000, ib_error, sources)


def _torch_int(env: Mapping[str, str], names: tuple[str, ...], default: int, sources: dict[str, str]) -> int:
    for name in names:
        value = parse_int(env.get(name))
        if value is not None:
            sources[names[0]] = f"{name}={env[name]}"
            return value
    sources[names[0]] = f"default {default}"
    return default


def _nccl_param(env: Mapping[str, str], name: str, default: int, sources: dict[str, str]) -> int:
    parsed = nccl_int(env.get(name, ""))
    if env.get(name) and not parsed.overflow:  # strtoll: garbage reads as 0, as NCCL reads it
        sources[name] = f"{name}={env[name]}"
        return parsed.value
    sources[name] = f"default {default}"
    return default


def check_timeouts(snapshot: NodeSnapshot, ctx: Context) -> Check:
    times = read_timeouts(ctx.env)
    details = [
        f"process-group timeout: {PG_TIMEOUT_S:.0f} s assumed (PyTorch's NCCL default; set in code, not seen here)",
        f"watchdog heartbeat: {times.heartbeat_s:.0f} s ({times.sources['TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC']})",
        f"wait after a timeout before raising: 4 x {times.dump_wait_s:g} s ({times.sources[DUMP_WAIT_NAMES[0]]})",
        f"a dead InfiniBand link is reported {_seconds(times.ib_error_s)} ({times.sources['NCCL_IB_TIMEOUT']},"
        f" {times.sources['NCCL_IB_RETRY_CNT']})",
    ]
    torch = snapshot.versions.torch
    grace = read_grace(ctx.env, torch.release if torch else None)
    details += grace_details(grace, times.dump_wait_s, snapshot.slurm, ctx.env)
    issues = _ib_issues(times) + _heartbeat_issues(times) + grace_issues(grace, snapshot.slurm, ctx.env)
    # fact=False: "fit together" is a claim of health, never shown beside a problem.
    return conclude(env_ids.ENV_TIMEOUTS, "the timeouts fit together", issues, details, fact=False)


def _ib_issues(times: Timeouts) -> list[Issue]:
    if times.ib_error_s < PG_TIMEOUT_S:
        return []
    return [
        warn(
            f"a dead InfiniBand link is reported {_seconds(times.ib_error_s)} (4.096 us x 2^NCCL_IB_TIMEOUT x"
            f" (NCCL_IB_RETRY_CNT + 1)), after PyTorch's default {PG_TIMEOUT_S:.0f} s process-group timeout: the watchdog fires"
            " first and the network error shows up as a collective timeout",
            "lower NCCL_IB_TIMEOUT (NCCL's default 20 reports in ~34 s), or pass init_process_group(timeout=...)"
            f" above {times.ib_error_s:.0f} s",
        )
    ]


def _seconds(value: float) -> str:
    return "never (an IB timeout of 0 waits forever)" if math.isinf(value) else f"after ~{value:.0f} s"


def _heartbeat_issues(times: Timeouts) -> list[Issue]:
    issues = []
    if times.heartbeat_s >= PG_TIMEOUT_S:
        issues.append(
            warn(
                f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={times.heartbeat_s:.0f} is not below PyTorch's default"
                f" {PG_TIMEOUT_S:.0f} s process-group timeout: a stuck watchdog and a collective timeout are seen at the same time,"
                " and the hang's debug output is cut short (PyTorch lowered the default to 480 s for this)",
                "keep TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC below the process-group timeout (unset it: 480 s); a longer"
                " timeout passed in code moves that bound",
            )
        )
    if 4 * times.dump_wait_s >= times.heartbeat_s:
        issues.append(
            warn(
                f"after a timeout the watchdog waits 4 x {times.dump_wait_s:g} s before it raises, but the heartbeat"
                f" monitor ends the process (SIGABRT) {times.heartbeat_s:.0f} s after the Flight Recorder dump:"
                " the timeout error is never raised and the communicators are not aborted",
                "keep 4 x TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC below TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC x 1000"
                " (defaults: 15000 ms and 480 s)",
            )
        )
    return issues
