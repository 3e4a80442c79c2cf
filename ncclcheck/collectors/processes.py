"""Process state from psutil: running, sleeping, stopped, zombie or gone."""

from __future__ import annotations

import psutil


def process_state(pid: int | None) -> str:
    if pid is None:
        return "unknown"
    try:
        status = str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "unknown"
    return {"stopped": "stopped", "tracing-stop": "stopped", "zombie": "zombie", "dead": "gone"}.get(status, status)
