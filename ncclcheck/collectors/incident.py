"""What ``ncclcheck run`` keeps of a hang beside its record, in the hang's own folder (``control/<hang>/``): NCCL RAS's
reply, the GPUs as NVML reads them and ``nvidia-smi -q``, the kernel's recent Xid lines, and the Flight Recorder dumps
the ranks wrote on request, copied under the hang's name so that no later dump overwrites them. Each step is bounded;
what could not be had is said, with why, in ``incident.json``. Nothing is written into the job."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping

from ncclcheck.collectors.control_plane import environ
from ncclcheck.collectors.dump_request import ask_for_dumps
from ncclcheck.collectors.gpu import look as look_at_gpus
from ncclcheck.collectors.ras import address, query
from ncclcheck.model.run import Incident

FR_WAIT_S = 10.0  # how long the ranks' Flight Recorder dumps are waited for once asked
SMI_S = 10.0
DMESG_S = 5.0
XID_LINES = 50
RAS_GATHER_S = 3


def keep(
    folder: str, fr_dir: str, ranks: Mapping[int, int], asked_at: float | None, early: Mapping[str, str] | None = None
) -> Incident:
    """Gather the incident into ``folder``; ``ranks``: each local rank's pid; ``asked_at``: when the ranks' dump pipes
    were written (None: no NCCL rank was asked). Returns what incident.json holds."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    kept: dict[str, str] = {}
    missing: dict[str, str] = {}

    def write(name: str, text: str) -> None:
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        kept[name] = path

    env = environ(next(iter(ranks.values()))) if ranks else {}
    reply = query(*address(env or None), gather_s=RAS_GATHER_S)
    if reply.status is not None:
        write("ras.json", json.dumps(dataclasses.asdict(reply.status), indent=1))
    elif reply.text is not None:
        write("ras.txt", reply.text)
    else:
        missing["ras"] = reply.error or "no answer"
    look = look_at_gpus()
    if look.error is None:
        write("gpus.json", json.dumps(dataclasses.asdict(look), indent=1))
        smi = _bounded(["nvidia-smi", "-q"], SMI_S)
        if smi[0] is not None:
            write("nvidia-smi-q.txt", smi[0])
        else:
            missing["nvidia-smi"] = smi[1]
    else:
        missing["gpus"] = look.error
    xid = _bounded(["dmesg"], DMESG_S)
    if xid[0] is not None:
        lines = [line for line in xid[0].splitlines() if "Xid" in line][-XID_LINES:]
        write("xid.txt", "".join(f"{line}\n" for line in lines))
    else:
        missing["xid"] = xid[1]
    for name, path in (early or {}).items():  # asked at the first suspicion: the stuck group's entries still there
        with contextlib.suppress(OSError):
            shutil.copyfile(path, os.path.join(folder, name))
            kept[name] = os.path.join(folder, name)
    if asked_at is not None:
        copied = _flight_dumps(fr_dir, folder, asked_at, len(ranks))
        kept.update(copied)
        if not copied:
            missing["flight_recorder"] = (
                f"no rank wrote a dump within {FR_WAIT_S:.0f} s of being asked (a rank whose watchdog is stuck, or "
                "TORCH_NCCL_TRACE_BUFFER_SIZE=0)"
            )
    found = Incident(folder, tuple(sorted(kept.items())), tuple(sorted(missing.items())))
    with open(os.path.join(folder, "incident.json"), "w", encoding="utf-8") as handle:
        json.dump(found.to_json(), handle, indent=1)
    return found


def _bounded(argv: list[str], timeout: float) -> tuple[str | None, str]:
    """A command's output, or why there is none."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} is not installed here"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return None, f"{argv[0]} could not run: {exc}"
    if done.returncode != 0:
        return None, f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[:200] or f'exit {done.returncode}'}"
    return done.stdout, ""


def _flight_dumps(fr_dir: str, folder: str, asked_at: float, ranks: int) -> dict[str, str]:
    """The dumps written since the ask (``fr/rank_<N>``, overwritten by each later dump), once their size holds
    still, copied as ``fr_rank_<N>`` into the hang's folder; waited for up to FR_WAIT_S."""
    deadline = time.monotonic() + FR_WAIT_S
    sizes: dict[str, int] = {}
    ready: dict[str, str] = {}
    while time.monotonic() < deadline and len(ready) < ranks:
        for path in glob.glob(os.path.join(glob.escape(fr_dir), "rank_*")):
            try:
                stat = os.stat(path)
            except OSError:
                continue
            if stat.st_mtime < asked_at - 1 or path in ready.values():
                continue
            if sizes.get(path) == stat.st_size and stat.st_size > 0:  # the same size twice: written
                ready[f"fr_{os.path.basename(path)}"] = path
            sizes[path] = stat.st_size
        time.sleep(0.5)
    out: dict[str, str] = {}
    for name, path in ready.items():
        target = os.path.join(folder, name)
        try:
            shutil.copyfile(path, target)
            out[name] = target
        except OSError:
            continue
    return out


class EarlyDumps:
    """The Flight Recorders asked for at the first suspicion of a stall (ranks still for half of --stall), before a
    busy group can push the stuck group's entries out of the ring: each rank's dump, once written, is copied to
    ``fr/early-<k>/`` at the next looks (never waited for), and the hang's incident takes those copies."""

    def __init__(self, fr_dir: str) -> None:
        self.fr_dir = fr_dir
        self.asked_at: float | None = None
        self.asks = 0
        self.folder: str | None = None
        self.sizes: dict[str, int] = {}

    def suspect(self, still: bool) -> int:
        """Ask once per stall (``still``: ranks stood still past half of --stall); returns how many ranks were asked."""
        if not still:
            self.asked_at, self.folder, self.sizes = None, None, {}
            return 0
        if self.asked_at is not None:
            self.collect()
            return 0
        asked, _ = ask_for_dumps(os.path.join(self.fr_dir, "pipe_"))
        if asked:
            self.asks += 1
            self.asked_at = time.time()
            self.folder = os.path.join(self.fr_dir, f"early-{self.asks}")
        return asked

    def collect(self) -> None:
        """Copy the dumps written since the ask whose size held still since the last look."""
        if self.asked_at is None or self.folder is None:
            return
        for path in glob.glob(os.path.join(glob.escape(self.fr_dir), "rank_*")):
            try:
                stat = os.stat(path)
            except OSError:
                continue
            target = os.path.join(self.folder, os.path.basename(path))
            if stat.st_mtime < self.asked_at - 1 or os.path.exists(target):
                continue
            if self.sizes.get(path) == stat.st_size and stat.st_size > 0:
                os.makedirs(self.folder, mode=0o700, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copyfile(path, target)
            self.sizes[path] = stat.st_size

    def copies(self) -> dict[str, str]:
        """The copies of this stall's early dumps, by the name the incident gives them."""
        if self.folder is None or not os.path.isdir(self.folder):
            return {}
        return {f"fr_early_{name}": os.path.join(self.folder, name) for name in sorted(os.listdir(self.folder))}
