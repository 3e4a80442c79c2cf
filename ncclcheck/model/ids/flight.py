"""The ids of the shared Flight Recorder analysis (analysis/flight): ``logs`` reads dumps on disk with it, ``watch``
and ``run`` live ranks' recorders."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "fr-"  # every id of the Flight Recorder analysis starts with it: how a user of its findings tells them

FR_DUMPS_MISSING: Final = "fr-dumps-missing"
FR_DUMP_UNREADABLE: Final = "fr-dump-unreadable"
FR_NOT_JOINED: Final = "fr-not-joined"
FR_STALLED: Final = "fr-stalled"
FR_NOT_STARTED: Final = "fr-not-started"
FR_P2P_UNMATCHED: Final = "fr-p2p-unmatched"
FR_OP_MISMATCH: Final = "fr-op-mismatch"
FR_SIZE_MISMATCH: Final = "fr-size-mismatch"
FR_DTYPE_MISMATCH: Final = "fr-dtype-mismatch"
