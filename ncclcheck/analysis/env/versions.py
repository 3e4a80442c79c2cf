"""``versions``: python, torch, CUDA, the driver, and the NCCL library that would really load."""

from __future__ import annotations

import re

from ncclcheck.analysis.env.context import Context
from ncclcheck.analysis.env.verdict import Issue, conclude, fail, warn
from ncclcheck.analysis.nccl_rules import decode_version, version_text
from ncclcheck.model.checks import Check
from ncclcheck.model.env import NodeSnapshot
from ncclcheck.model.ids import env as env_ids
from ncclcheck.probes.versions import VersionFacts

# Minimum driver per CUDA major (CUDA minor-version compatibility table).
MIN_DRIVER = {13: 580, 12: 525, 11: 450}


def check_versions(snapshot: NodeSnapshot, ctx: Context) -> Check:
    facts = snapshot.versions
    issues: list[Issue] = []
    details = [f"python {facts.python} ({facts.platform})"]
    torch = facts.torch
    if torch is None:
        issues.append(
            warn(
                "torch is not importable from this Python: no gloo or NCCL backend here",
                "run ncclcheck with the Python of your training environment (pip install ncclcheck there)",
            )
        )
    else:
        build = f"CUDA {torch.cuda}" if torch.cuda else "CPU-only build"
        details.append(f"torch {torch.version} ({build}) at {torch.path}")
        if facts.torch_import_error:
            issues.append(_import_issue(torch.version, facts.torch_import_error, ctx))
        elif snapshot.options.root == "/" and not snapshot.options.try_import:
            details.append("import torch.distributed: not tried (--no-import)")
        details.append(f"backends built in: gloo {_yes(torch.gloo_built)}, nccl {_yes(torch.nccl_built)}")
        if torch.cuda and torch.nccl_built is False:
            issues.append(warn("this CUDA build of torch has no NCCL backend", "install a torch wheel built with NCCL"))
    details += _nccl_lines(facts)
    details.append(f"NVIDIA driver {facts.driver_version or 'not loaded'}")
    if facts.cuda_driver_api:
        details.append(f"CUDA driver API {facts.cuda_driver_api // 1000}.{facts.cuda_driver_api % 1000 // 10}")
    issues += _driver_issues(facts) + _nccl_issues(facts)
    summary = _summary(facts, ctx)
    return conclude(env_ids.VERSIONS, summary, issues, details)


def _import_issue(version: str, error: str, ctx: Context) -> Issue:
    """Why ``import torch.distributed`` failed: a variable the error names, else the install."""
    named = [n for n in ctx.env if re.search(rf"(?<![A-Z0-9_]){re.escape(n)}(?![A-Z0-9_])", error)]
    if named:
        name = named[0]
        return fail(
            f"torch {version} does not import here because of {name}={ctx.env[name]}: {error}",
            f"fix or unset {name} (env.vars says what it takes); the install itself is not at fault",
        )
    return fail(
        f"torch {version} is installed but does not import here: {error}",
        "run `python -c 'import torch.distributed'` in this environment and fix what it says"
        " (a missing CUDA library, a broken or mixed install: reinstall torch)",
    )


def _yes(flag: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[flag]


def _summary(facts: VersionFacts, ctx: Context) -> str:
    torch = f"torch {facts.torch.version}" if facts.torch else "no torch"
    nccl = f"NCCL {version_text(ctx.nccl)}" if ctx.nccl else "no libnccl found"
    return f"python {facts.python}, {torch}, {nccl}"


def _nccl_lines(facts: VersionFacts) -> list[str]:
    lines = []
    for i, lib in enumerate(facts.nccl_libs):
        role = "would load" if i == 0 else "shadowed"
        version = version_text(decode_version(lib.version_code)) if lib.version_code else f"unloadable: {lib.error}"
        lines.append(f"libnccl {version} from {lib.origin}: {lib.path} ({role})")
    if facts.nccl_wheel:
        lines.append(f"pip package {facts.nccl_wheel}")
    if not lines:
        lines.append("no libnccl on this node (fine for gloo; the nccl backend needs one)")
    return lines


def _driver_issues(facts: VersionFacts) -> list[Issue]:
    torch = facts.torch
    if not torch or not torch.cuda or not facts.driver_version:
        return []
    cuda_major = int(torch.cuda.split(".")[0])
    driver_major = int(facts.driver_version.split(".")[0])
    need = MIN_DRIVER.get(cuda_major)
    if need is None or driver_major >= need:
        return []
    return [
        fail(
            f"torch is built for CUDA {torch.cuda}, which needs driver >= {need}; found {facts.driver_version}",
            f"upgrade the NVIDIA driver to >= {need}, or install a torch wheel built for an older CUDA",
        )
    ]


def _nccl_issues(facts: VersionFacts) -> list[Issue]:
    issues: list[Issue] = []
    libs = facts.nccl_libs
    if libs and libs[0].version_code is None:
        issues.append(
            warn(
                f"libnccl at {libs[0].path} cannot be loaded: {libs[0].error}",
                "remove the broken library from LD_PRELOAD/LD_LIBRARY_PATH or reinstall nvidia-nccl",
            )
        )
    loaded = next((lib for lib in libs if lib.version_code), None)
    if loaded and facts.nccl_wheel:
        wheel_version = facts.nccl_wheel.split("==", 1)[1]
        runtime = version_text(decode_version(loaded.version_code or 0))
        if not wheel_version.startswith(runtime):
            issues.append(
                warn(
                    f"runtime NCCL {runtime} ({loaded.origin}) differs from the pip package {facts.nccl_wheel}",
                    "unset LD_PRELOAD/LD_LIBRARY_PATH entries that carry another libnccl, so every node"
                    " runs the same NCCL",
                )
            )
    return issues
