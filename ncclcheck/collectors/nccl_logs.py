"""Read the NCCL_DEBUG_FILE logs a smoke run left in its log dir into per-rank transport maps."""

from __future__ import annotations

import glob
import os
from itertools import chain

from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.nccl import ranks
from ncclcheck.collectors.logfiles import LogSource, lines
from ncclcheck.model.logs import RankLog


def nccl_transports(log_dir: str) -> tuple[RankLog, ...]:
    paths = sorted(glob.glob(os.path.join(log_dir, "nccl.*.log")))
    framed = chain.from_iterable(frame_all(lines(LogSource(p, p)), p) for p in paths)
    return ranks(framed)
