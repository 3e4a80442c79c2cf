"""The ids of ``logs``' findings that code builds or compares outside its rule tables.

Most of ``logs``' ids live in its rule tables (analysis/logs/rules.py and the modules it gathers, described row by row
in data/messages.tsv); a table row keeps its literal. An id gets a constant here when code other than its row builds
it (cross-rank checks, crash folding, stack dumps, the verdict) or asks for it (which findings are symptoms, echoes,
wrappers, GPU faults, the ranks that waited).
"""

from __future__ import annotations

from typing import Final

# timeouts: the ranks they name are the ones that waited
COLLECTIVE_TIMEOUT: Final = "collective-timeout"
GLOO_TIMEOUT: Final = "gloo-timeout"
WATCHDOG_STUCK: Final = "watchdog-stuck"
COLLECTIVE_MISMATCH: Final = "collective-mismatch"
COLLECTIVE_SIZE_MISMATCH: Final = "collective-size-mismatch"  # one collective, different sizes: the timeouts' cause
DESYNC_REPORT: Final = "desync-report"
# a peer's failure seen from a rank that did not start it
PEER_CRASHED: Final = "peer-crashed"
PEER_CLOSED: Final = "peer-closed"
PROCESS_TAKEN_DOWN: Final = "process-taken-down"
WATCHDOG_EXCEPTION: Final = "watchdog-exception"
NCCL_RESULT: Final = "nccl-result"
# wrappers: an error that reports another
NCCL_SYSTEM_ERROR: Final = "nccl-system-error"
CHILD_FAILED: Final = "child-failed"
CHILD_NO_ERROR_FILE: Final = "child-no-error-file"
PYTHON_EXCEPTION: Final = "python-exception"
LAUNCHER_TERMINATED: Final = "launcher-terminated"
PROCESS_ABORTED: Final = "process-aborted"
UNRECOGNISED_ERROR: Final = "unrecognised-error"
EXCEPTION_IGNORED: Final = "exception-ignored"  # an exception Python's unraisable hook ignored
# a connection NCCL kept retrying (analysis/logs/diagnose.py adds it for a retry no init completed after)
CONNECT_FAILED: Final = "connect-failed"
# srun's report of a task's end (its lines order the tasks' ends: analysis/logs/verdict.py)
SLURM_TASK_ENDED: Final = "slurm-task-ended"
# torchrun's agent restarting its worker group, the group finishing, and a job that finished after restarts
WORKER_GROUP_RESTART: Final = "worker-group-restart"
WORKER_GROUP_FINISHED: Final = "worker-group-finished"
JOB_RECOVERED: Final = "job-recovered"
SEVERAL_RUNS: Final = "several-runs"  # torchrun launched more than once in these logs
# launchers other than torchrun: a rank's end as the launcher reports it (Open MPI, DeepSpeed)
MPI_RANK_KILLED: Final = "mpi-rank-killed"
PROCESS_KILLED: Final = "process-killed"  # SIGKILL, as the shell or a launcher reports it
LAUNCHER_RANK_ENDED: Final = "launcher-rank-ended"
# a rank that never reached a barrier or the store another rank waited on there
MONITORED_BARRIER_FAILED: Final = "monitored-barrier-failed"
STORE_CLIENTS_MISSING: Final = "store-clients-missing"
# a rank that reports what its peers sent or where they listen: which side is wrong is not in its line
SOCKET_MESSAGE_TRUNCATED: Final = "socket-message-truncated"
GLOO_CONNECT_FAILED: Final = "gloo-connect-failed"
# a rank's own death
NATIVE_CRASH: Final = "native-crash"
THREAD_DIED: Final = "thread-died"
# GPU faults: what the ranks' errors beside them follow from
GPU_XID: Final = "gpu-xid"
GPU_XID_PROGRAM: Final = "gpu-xid-program"
GPU_FALLEN_OFF_BUS: Final = "gpu-fallen-off-bus"
GPU_PROBE_FAILED: Final = "gpu-probe-failed"
GPU_ECC_ERROR: Final = "gpu-ecc-error"
CUDA_ILLEGAL_ADDRESS: Final = "cuda-illegal-address"
CUDA_LAUNCH_FAILURE: Final = "cuda-launch-failure"
CUDA_LAUNCH_TIMEOUT: Final = "cuda-launch-timeout"
PCIE_AER_UNCORRECTED: Final = "pcie-aer-uncorrected"
# across the ranks' logs (analysis/logs/cross_rank.py)
SEVERAL_JOBS: Final = "several-jobs"
VERSION_MISMATCH: Final = "version-mismatch"
SUSPICIOUS_INTERFACE: Final = "suspicious-interface"
P2P_DISABLED: Final = "p2p-disabled"
SOCKET_IFNAME_NOT_FOUND: Final = "socket-ifname-not-found"
MIXED_LINK_LAYERS: Final = "mixed-link-layers"
INTRA_NODE_NET: Final = "intra-node-net"
RAS_ALL_OK: Final = "ras-all-ok"
# stack dumps (analysis/logs/stack_verdict.py)
STACKS_STRAGGLER: Final = "stacks-straggler"
STACKS_WAITING: Final = "stacks-waiting"
STACKS_ONE: Final = "stacks-one"
STACKS_NOT_RANKS: Final = "stacks-not-ranks"
STACKS_UNREADABLE: Final = "stacks-unreadable"
# what ncclcheck itself recorded about the job (analysis/logs/verdict.py)
ENDED_BY_NCCLCHECK: Final = "ended-by-ncclcheck"
HANG_RECORDED: Final = "hang-recorded"
