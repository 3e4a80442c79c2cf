"""The ids of ``watch``'s findings (analysis/watch, analysis/ras.py, analysis/gpu.py, commands/watch); ``run``
judges its live job with them too."""

from __future__ import annotations

from typing import Final

# a rank's stack against the others' (analysis/watch/findings.py)
STRAGGLER: Final = "straggler"
MISMATCH: Final = "mismatch"
STALLED: Final = "stalled"
WAITING_REMOTE: Final = "waiting-remote"
UNREADABLE: Final = "unreadable"
NO_PROGRESS: Final = "no-progress"
# how a rank or the job ended (analysis/watch/ends.py)
FINISHED: Final = "finished"
EXITED: Final = "exited"
DEAD: Final = "dead"
# arguments the ranks disagree on (analysis/watch/disagree.py)
ROOT_MISMATCH: Final = "root-mismatch"
GROUP_MISMATCH: Final = "group-mismatch"
# the world and its groups forming (analysis/watch/world.py)
STARTUP: Final = "startup"
GROUP_CREATION: Final = "group-creation"
GROUP_ORDER: Final = "group-order"
SUBGROUP_WAIT: Final = "subgroup-wait"
UNEVEN_INPUTS: Final = "uneven-inputs"
# point-to-point waits (analysis/watch/waitfor.py, posted.py)
P2P_DEADLOCK: Final = "p2p-deadlock"
P2P_TAG_MISMATCH: Final = "p2p-tag-mismatch"
P2P_WRONG_PEER: Final = "p2p-wrong-peer"
P2P_UNMATCHED: Final = "p2p-unmatched"
# fail-slow (analysis/watch/slow_findings.py)
SLOW_RANK: Final = "slow-rank"
SLOW_NODE: Final = "slow-node"
COMMUNICATION_BOUND: Final = "communication-bound"
# the control plane asked for the ranks' Flight Recorders (analysis/watch/flight.py)
CONTROL_SILENT: Final = "control-silent"
# a multi-node job's agents (analysis/watch/nodes.py)
LAUNCHER_GONE: Final = "launcher-gone"
NODE_MISSING: Final = "node-missing"
NODE_SILENT: Final = "node-silent"
NODE_UNREACHABLE: Final = "node-unreachable"
FANOUT_OUTPUT: Final = "fanout-output"
# the GPUs (analysis/gpu.py) and NCCL RAS (analysis/ras.py)
GPU_IDLE_RANK: Final = "gpu-idle-rank"
GPU_SPINNING: Final = "gpu-spinning"
RAS_DEAD: Final = "ras-dead"
RAS_ERROR: Final = "ras-error"
RAS_BEHIND: Final = "ras-behind"
