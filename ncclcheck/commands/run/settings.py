"""``ncclcheck run``'s command line made into what the run wants, and the evidence switched on before the job
starts: the run dir made, the environment, the control plane's hook, the start lines and DIR/manifest.json."""

from __future__ import annotations

import argparse
import os
import platform
import socket
import time
from dataclasses import dataclass
from typing import Any

from ncclcheck import __version__
from ncclcheck.analysis.run.env import backend_notes, evidence_env
from ncclcheck.commands.run.control import prepare
from ncclcheck.commands.run.live import Watching
from ncclcheck.exits import UsageError
from ncclcheck.model.run import EnvSetting, RunDir
from ncclcheck.report_files import replace_json
from ncclcheck.views.run import start_lines


@dataclass(frozen=True)
class RunSettings:
    """What ``ncclcheck run`` was asked for."""

    argv: tuple[str, ...]  # the launcher command
    run_dir: RunDir
    host: str
    watching: Watching
    deep: bool
    control: bool  # the control plane's hook (not --no-control)
    json: bool


@dataclass(frozen=True)
class Evidence:
    """What was switched on for the job, and notes on what could not be."""

    settings: tuple[EnvSetting, ...]
    notes: tuple[str, ...]
    hook_dir: str | None  # first on the job's PYTHONPATH (None: no control plane)


def settings(args: argparse.Namespace) -> RunSettings:
    argv = list(args.launcher)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("ncclcheck run: no command to run: ncclcheck run [options] -- torchrun ... train.py")
    if args.stall < 3 or args.interval <= 0:
        raise UsageError("ncclcheck run: --stall must be at least 3 s and --interval above 0")
    host = socket.gethostname()
    root = (
        os.path.abspath(args.dir) if args.dir else fresh_dir(f"ncclcheck-run-{host}-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    watching = Watching(args.stall, args.interval, args.on_hang)
    return RunSettings(tuple(argv), RunDir(root), host, watching, args.deep, not args.no_control, args.json)


def fresh_dir(base: str) -> str:
    """``base``, made now, or ``base-2``, ``base-3``... where another run took it (two runs started in the same
    second in one directory: several tasks of one node under srun); ``base`` when none can be made (switch_on
    then says why)."""
    for n in range(1, 1000):
        path = os.path.abspath(base if n == 1 else f"{base}-{n}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError:
            break
    return os.path.abspath(base)


def switch_on(wanted: RunSettings, console: Any) -> Evidence:
    """Make the run dir, choose the evidence, place the hook, say what was set and write the manifest."""
    run_dir = wanted.run_dir
    try:
        for folder in run_dir.folders:
            os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"ncclcheck run: cannot make the run dir {run_dir.root}: {exc.strerror} (give --dir)"
        ) from None
    torch_version = torch_installed()
    chosen = evidence_env(os.environ, run_dir, wanted.deep, torch_version)
    notes = backend_notes(torch_version, os.environ)
    serving, hook_dir, control_notes = prepare(run_dir, wanted.control)
    evidence = Evidence(chosen + ((serving,) if serving else ()), notes + control_notes, hook_dir)
    start_lines(evidence.settings, evidence.notes, run_dir, console)
    replace_json(run_dir.manifest, _manifest(wanted, evidence))
    return evidence


def _manifest(wanted: RunSettings, evidence: Evidence) -> dict[str, Any]:
    return {
        "schema": "ncclcheck.run-manifest/1",
        "command": list(wanted.argv),
        "host": wanted.host,
        "started": time.time(),
        "cwd": os.getcwd(),
        "set": {name: s.value for s in evidence.settings if not s.kept for name in s.names},
        "kept": {s.kept_name: s.value for s in evidence.settings if s.kept},
        "notes": list(evidence.notes),
        "versions": {"ncclcheck": __version__, "python": platform.python_version(), "torch": torch_installed()},
        "slurm": {k: v for k, v in os.environ.items() if k in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_PROCID")},
    }


def torch_installed() -> str | None:
    """The installed torch's version, read without importing it."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
