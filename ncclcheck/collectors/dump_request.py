"""Ask NCCL ranks for a Flight Recorder dump through their dump pipes (TORCH_NCCL_DEBUG_INFO_PIPE_FILE).

Each rank's NCCL watchdog makes ``<stem><global rank>.pipe`` and reads it once a second; a write makes that
rank dump (to TORCH_FR_DUMP_TEMP_FILE) and carry on training. Opening a pipe nobody reads fails with ENXIO:
that rank has no NCCL watchdog (gloo, no collective yet) or is gone. Nothing else is ever written.
"""

from __future__ import annotations

import errno
import glob
import os


def ask_for_dumps(stem: str) -> tuple[int, int]:
    """Write to every pipe under ``stem``; returns (asked, pipes with no reader)."""
    asked = unread = 0
    for path in sorted(glob.glob(f"{glob.escape(stem)}*.pipe")):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            unread += exc.errno in (errno.ENXIO, errno.ENOENT)
            continue
        try:
            os.write(fd, b"1\n")
            asked += 1
        except OSError:
            unread += 1
        finally:
            os.close(fd)
    return asked, unread
