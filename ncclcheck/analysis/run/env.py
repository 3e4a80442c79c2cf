"""What ``ncclcheck run`` switches on before the job starts: pure, from the user's environment and the run dir.

Only what the user has not set: a variable they set (under any of its names) is kept as it is. Never
touched: TORCH_NCCL_ASYNC_ERROR_HANDLING (its default is what Flight Recorder dumps are tested with) and
TORCHELASTIC_ERROR_FILE (torchrun writes its own per worker).
"""

from __future__ import annotations

from collections.abc import Mapping

from ncclcheck.model.run import EnvSetting, RunDir

NEVER = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE")


FR_NAMES_SINCE = (2, 8)  # torch reads TORCH_FR_* from 2.8 on, and warns that the TORCH_NCCL_* aliases are deprecated


def _version(torch_version: str | None) -> tuple[int, ...] | None:
    parts = (torch_version or "").split("+")[0].split(".")[:2]
    return tuple(int(p) for p in parts) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def evidence_env(
    env: Mapping[str, str], run_dir: RunDir, deep: bool, torch_version: str | None = None
) -> tuple[EnvSetting, ...]:
    """What to switch on. Both names of a Flight Recorder setting are set unless the torch here is known to read
    the new one (>= 2.8), where the old alias would only add a deprecation warning to every rank's output."""
    wanted = [
        (
            ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
            "2000",
            "Flight Recorder: the last 2000 collectives of every process group, per rank",
            "a ring buffer in memory; no measurable step-time cost (on by default since torch 2.6)",
        ),
        (
            ("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"),
            "1",
            "a Flight Recorder dump from every rank when a collective times out",
            "none until a timeout",
        ),
        (
            ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
            run_dir.fr_dumps,
            "the dumps land in the run dir (fr/rank_<N>)",
            "none",
        ),
        (
            ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE",),
            run_dir.fr_pipes,
            "a dump on demand: ncclcheck asks for one when it sees a hang (fr/pipe_<N>.pipe)",
            "one FIFO per rank, read once a second by the NCCL watchdog",
        ),
        (
            ("TORCH_NCCL_ENABLE_TIMING",),
            "1",
            "each collective's start on its GPU recorded: the Flight Recorder tells a rank whose GPU never began a"
            " collective (busy with a long or hung kernel before it) from a transport hang",
            "one more CUDA event per collective",
        ),
        (
            ("NCCL_DEBUG",),
            "INFO" if deep else "WARN",
            "NCCL's own errors and warnings" + (", and its set-up (rings, transports)" if deep else ""),
            "INFO: a few hundred lines per rank at start-up, then little" if deep else "near zero",
        ),
        (
            ("NCCL_DEBUG_FILE",),
            run_dir.nccl_file,
            "one NCCL log file per process in the run dir",
            "none",
        ),
        (
            ("PYTHONFAULTHANDLER",),
            "1",
            "Python stacks of every thread when a rank crashes or aborts (SIGSEGV, SIGABRT)",
            "none",
        ),
    ]
    if deep:
        wanted += [
            (
                ("TORCH_DISTRIBUTED_DEBUG",),
                "DETAIL",
                "every collective checked across ranks (a mismatch raises at once, naming both calls)",
                "a check per collective: noticeably slower steps",
            ),
            (
                ("TORCH_NCCL_DESYNC_DEBUG",),
                "1",
                "on a timeout, which rank did not join the collective",
                "a store write at the start and end of every collective, per rank",
            ),
        ]
    version = _version(torch_version)
    out = []
    for names, value, what, cost in wanted:
        given = next((n for n in names if n in env), None)  # the user's, under any of its names, is kept
        if version is not None and version >= FR_NAMES_SINCE and names[0].startswith("TORCH_FR_"):
            names = names[:1]
        if given is not None:
            out.append(EnvSetting(names, env[given], what, cost, kept=True, kept_name=given))
        else:
            out.append(EnvSetting(names, value, what, cost))
    return tuple(out)


def job_env(env: Mapping[str, str], settings: tuple[EnvSetting, ...]) -> dict[str, str]:
    """The job's environment: the user's, plus every setting not kept, under each of its names."""
    out = dict(env)
    for s in settings:
        if not s.kept:
            out.update({name: s.value for name in s.names})
    return out


def backend_notes(torch_version: str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """What the evidence cannot give on this torch or backend, said once at start."""
    notes = [
        "Flight Recorder dumps on timeout and the dump pipe exist on the NCCL backend only: a gloo job's "
        "Flight Recorder is read live through the control plane on a hang (not with --no-control); its other "
        "evidence is the live stacks, the launcher's output and the hang records"
    ]
    version = _version(torch_version)
    if version is not None and version >= (2, 15) and env.get("TORCH_DIST_USE_NCCL2") != "0":
        notes.append(
            "torch >= 2.15 runs its new NCCL backend by default, which has no dump pipe: "
            "TORCH_DIST_USE_NCCL2=0 selects the older one (your choice, not set here)"
        )
    return tuple(notes)
