"""The ids of ``smoke``'s own findings (analysis/smoke, commands/smoke); its ranks' logs add ``logs``' ids."""

from __future__ import annotations

from typing import Final

RANK_DIED: Final = "rank-died"
LAUNCH_FAILED: Final = "launch-failed"
SMOKE_HANG: Final = "smoke-hang"
SMOKE_NOTHING_VERIFIED: Final = "smoke-nothing-verified"  # a run that ended with no op verified
# a field of the ranks' fingerprints that differs between them (analysis/smoke/fingerprint.py)
FINGERPRINT_TORCH: Final = "fingerprint-torch"
FINGERPRINT_NCCL: Final = "fingerprint-nccl"
FINGERPRINT_BACKEND: Final = "fingerprint-backend"
FINGERPRINT_ENV: Final = "fingerprint-env"
FINGERPRINT_INTERFACE: Final = "fingerprint-interface"
