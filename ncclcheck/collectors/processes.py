"""Process state from psutil: running, sleeping, stopped, zombie or gone."""

from __future__ import annotations

import psutil

# psutil's names, folded to what a rank's state means for a job: a traced rank is as stopped as a SIGSTOPped one.
STATUS = {"tracing-stop": "stopped", "dead": "gone", "idle": "sleeping", "waking": "running"}


def normal_status(status: str) -> str:
    return STATUS.get(status, status)


def process_state(pid: int | None) -> str:
    if pid is None:
        return "unknown"
    try:
        status = str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "unknown"
    return normal_status(status)
