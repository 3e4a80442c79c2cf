"""``ncclcheck run``'s control plane: the hook put first on the job's PYTHONPATH before it starts, and on a hang
every local rank's live Flight Recorder and stacks fetched through it, judged, and written to the run dir.

  DIR/control/                 0700; what the hook wrote: rank<N>.json (where rank N serves), rank<N>.sock, note-*.txt
  DIR/control/hook/sitecustomize.py   the hook (run's copy of ncclcheck/collectors/control_hook.py)
  DIR/control/hook/ncclcheck_hook_p2p.py   its point-to-point record (a copy of collectors/control_hook_p2p.py)
  DIR/control/hang-<time>-<k>/ per hang: live_fr_rank<N>.json, live_nccl_rank<N>.json (NCCL builds),
                               live_stacks_rank<N>.txt (faulthandler, every thread), answers.json (the judgement)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import py_compile
import shutil
import stat
from pathlib import Path
from typing import Any

from ncclcheck.analysis.watch.flight import culprits, exact, overrides
from ncclcheck.collectors import control_hook, control_hook_p2p, incident
from ncclcheck.collectors.control_plane import FILES, RankAnswer, fetch, recorders, sockets_in
from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FrDump, Unreadable
from ncclcheck.model.ranks import span
from ncclcheck.model.run import EnvSetting, HangRecord, RunDir
from ncclcheck.report_files import replace_json

WHAT = "each rank's live Flight Recorder and stacks on a hang, through torch's control plane (a sitecustomize hook)"
COST = (
    "per rank that creates a process group, torch's HTTP server on a unix socket in DIR/control: 9 threads (a "
    "listener and an idle pool), no measurable memory, idle until asked; about 1 ms added to every python start "
    "of the job (processes without a process group start nothing)"
)


def prepare(run_dir: RunDir, enabled: bool) -> tuple[EnvSetting | None, str | None, tuple[str, ...]]:
    """The control dir and the hook in it: the setting to show and set, the directory to put first on PYTHONPATH,
    and notes. Nothing when ``enabled`` is false (--no-control) or the hook cannot be placed."""
    if not enabled:
        return None, None, ("--no-control: no control plane; a hang's evidence is the sampled stacks (py-spy)",)
    control_dir, hook_dir = run_dir.control, run_dir.hook
    if os.pathsep in hook_dir:
        return None, None, (f"no control plane: the run dir's path holds {os.pathsep!r}, which PYTHONPATH cannot",)
    try:
        os.makedirs(hook_dir, exist_ok=True)
        os.chmod(control_dir, 0o700)
        hook, p2p = RunDir.HOOK_FILES
        shutil.copyfile(control_hook.__file__, os.path.join(hook_dir, hook))
        shutil.copyfile(control_hook_p2p.__file__, os.path.join(hook_dir, p2p))
        # compiled now: every python start of the job would compile it again where it cannot write __pycache__
        for name in RunDir.HOOK_FILES:
            py_compile.compile(os.path.join(hook_dir, name), doraise=True)
    except (OSError, py_compile.PyCompileError) as exc:
        return None, None, (f"no control plane: cannot write {hook_dir}: {exc}",)
    notes: tuple[str, ...] = ()
    where = control_hook.socket_path(control_dir, 0)
    if not where.startswith(control_dir):
        notes = (f"the run dir's path is too long for a unix socket: the ranks serve in {os.path.dirname(where)}",)
    return EnvSetting((control_hook.CONTROL_DIR,), control_dir, WHAT, COST), hook_dir, notes


def with_hook(env: dict[str, str], hook_dir: str | None) -> dict[str, str]:
    """The job's environment with the hook's directory first on PYTHONPATH."""
    if hook_dir is None:
        return env
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": hook_dir + (os.pathsep + rest if rest else "")}


def on_hang(run_dir: RunDir, record: HangRecord, console: Any) -> HangRecord:
    """Fetch every local rank's FR and stacks, judge them, and return the record with the exact culprit when the
    Flight Recorders name one other than the stacks' vote (which they then override; where they agree the stacks'
    finding stays, it says more: "not in any collective"); the hang JSON gains ``control_plane``."""
    sockets = sockets_in(run_dir.control)
    if not sockets:
        return record
    answers = fetch(sockets)
    out = run_dir.incident(record.path)
    os.makedirs(out, mode=0o700, exist_ok=True)
    dumps, unreadable, silent = _save(out, answers)
    findings = exact(dumps, unreadable, silent)
    blamed = culprits(findings)
    summary = {
        "dir": out,
        "asked": {str(a.rank): a.socket for a in answers},
        "answered": sorted(a.rank for a in answers if not a.error),
        "silent": {str(r): why for r, why in sorted(silent.items())},
        "findings": [f.to_json() for f in findings],
        "culprits": list(blamed),
    }
    replace_json(os.path.join(out, "answers.json"), summary)
    _add_to(record.path, summary)
    _say(console, out, answers, silent)
    first = next((f for f in findings if f.severity == "error" and f.culprits == blamed and blamed), None)
    stacks = (Finding(record.kinds[0], "error", record.message, ranks=record.ranks, culprits=record.culprits),)
    if first is None or blamed == record.culprits or not overrides(stacks if record.kinds else (), findings):
        return record
    return dataclasses.replace(
        record, kinds=(first.id, *record.kinds), ranks=first.ranks, culprits=blamed, message=first.message
    )


def _save(out: str, answers: list[RankAnswer]) -> tuple[list[FrDump], list[Unreadable], dict[int, str]]:
    """Keep every answer in the hang's folder; the recorders read from it, named by the files that hold them."""
    for a in answers:
        for handler, body in a.bodies:
            if body is not None:
                with open(os.path.join(out, FILES[handler].format(a.rank)), "wb") as f:
                    f.write(body)
    return recorders(answers, lambda a, h: os.path.join(out, FILES[h].format(a.rank)))


def _add_to(hang_path: str, summary: dict[str, Any], key: str = "control_plane") -> None:
    try:
        with open(hang_path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return
    replace_json(hang_path, {**data, key: summary})


def keep_incident(
    run_dir: RunDir,
    record: HangRecord,
    ranks: dict[int, int],
    asked_at: float | None,
    console: Any,
    early: dict[str, str] | None = None,
) -> None:
    """The rest of the incident beside the hang's record (collectors/incident.py), said in one line."""
    folder = run_dir.incident(record.path)
    found = incident.keep(folder, run_dir.fr, ranks, asked_at, early)
    _add_to(record.path, found.to_json(), "incident")
    kept = ", ".join(name for name, _ in found.kept) or "nothing more"
    console.print(f"ncclcheck run: incident kept in {folder}: {kept}")


def _say(console: Any, out: str, answers: list[RankAnswer], silent: dict[int, str]) -> None:
    answered = [a.rank for a in answers if not a.error]
    console.print(
        f"ncclcheck run: control plane: rank {span(answered) or 'none'} answered (Flight Recorder, stacks: {out})"
    )
    if silent:
        console.print(f"ncclcheck run: rank {span(sorted(silent))} did not answer within 1 s", style="yellow")


def no_server(run_dir: RunDir) -> tuple[int, ...]:
    """Ranks whose torch has no _WorkerServer (the hook recorded it): their evidence is py-spy's only."""
    out = []
    for path in Path(run_dir.control).glob("rank*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("socket") is None and isinstance(data.get("rank"), int):
            out.append(data["rank"])
    return tuple(sorted(out))


def backends(run_dir: RunDir) -> tuple[str, ...]:
    """The default process group's backend each rank's hook recorded (none without the hook)."""
    found = set()
    for path in Path(run_dir.control).glob("rank*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("backend"), str):
            found.add(data["backend"])
    return tuple(sorted(found))


def finish(run_dir: RunDir) -> None:
    """The job is over: its sockets (and the short directory under /tmp, if one was used) go."""
    control_dir = run_dir.control
    for where in {control_dir, control_hook.short_dir(control_dir)}:
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            path = os.path.join(where, name)
            if name.endswith(".sock") and stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        if where != control_dir:
            with contextlib.suppress(OSError):
                os.rmdir(where)
