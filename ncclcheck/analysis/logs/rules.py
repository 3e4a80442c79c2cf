"""The message catalogue: each rule is a literal prefilter, a regex, a finding id, and what to tell the user.

Literal-first matching keeps a multi-GB log fast: the regex runs only on lines holding the literal, and
``gate`` skips whole blocks holding none. Each literal is a part every match of its regex contains (so
a rule never misses a line its regex would match), as long as possible and with a capital where the
message has one: rare characters make the gate fast.
``secondary`` marks echoes (a peer closing, a flushed queue, a stuck watchdog): they never win the
root cause while a primary error is in the logs.
"""

from __future__ import annotations

from ncclcheck.analysis.logs.exit_rules import EXIT_RULES
from ncclcheck.analysis.logs.gpu_rules import GPU_RULES
from ncclcheck.analysis.logs.ib_rules import IB_RULES
from ncclcheck.analysis.logs.rule import Rule as Rule
from ncclcheck.analysis.logs.rule import make_rule as _rule
from ncclcheck.analysis.logs.setup_rules import SETUP_RULES
from ncclcheck.model.ids import logs as logs_ids

TRAIL_FIX = (
    "a consequence: NCCL prints this at each call on the way up from an error; the WARN line before the trail (or"
    " the first error of the rank at the bottom of it) says what failed; rerun with NCCL_DEBUG=WARN if it is missing"
)
STORE_RETRY_FIX = (
    "nothing if the job went on (the store starts with rank 0 or the first agent, the others retry until it is up);"
    " if torch gave up ('timed out after', 'failed to connect to any network address'): MASTER_ADDR /"
    " --rdzv-endpoint must be an address every node routes to; `ncclcheck env --master-addr HOST --master-port PORT`"
    " checks it"
)
STORE_LOST_FIX = (
    "a consequence: the store lives in rank 0 (env:// launches) or in node 0's torchrun agent; read that"
    " process's log and its node's dmesg (OOM killer) for why it died, then restart the job"
)
NO_RDMA = "no usable RDMA device: NCCL falls back to TCP sockets (slow)"
NO_RDMA_FIX = (
    "if the node has IB/RoCE NICs: pass /dev/infiniband and IPC_LOCK into the container (--device"
    " /dev/infiniband --cap-add IPC_LOCK, or the RDMA device plugin), check `ibv_devinfo`"
)
OOM = "the GPU ran out of memory inside NCCL (buffers or kernel launch)"
OOM_FIX = (
    "leave GPU memory headroom (smaller batch or sharding), create communicators before the model fills the"
    " GPU, or lower NCCL_BUFFSIZE"
)
HOST_OOM_FIX = (
    "host RAM ran out (dataloader workers and their prefetch, pinned memory, a leak, several ranks' copies of the"
    " data): lower num_workers/prefetch_factor, share the dataset, or request more memory (sbatch --mem);"
    " `dmesg` on the node names the killed process; the peers' 'connection closed' errors are echoes"
)
DESYNC_FIX = (
    "the rank(s) named are the cause (TORCH_NCCL_DESYNC_DEBUG compared every rank's progress in the store): see"
    " what they were doing at that collective (their stack, their last lines); a dead rank's own log says why"
)
OFI_FIX = (
    "check the provider and the device inside the container: `fi_info -p efa` (or the provider in FI_PROVIDER),"
    " /dev/infiniband/uverbs* passed in, the EFA security group allowing all traffic between the nodes, and the"
    " aws-ofi-nccl build matching the NCCL in use (NCCL_NET_PLUGIN)"
)
CONNECT_FIX = (
    "refused = nothing listens there (peer died, stale rendezvous file, wrong IP); timed out or no route ="
    " a firewall or the wrong interface: set NCCL_SOCKET_IFNAME to the routed interface on every node and"
    " test the port with `nc`"
)
# One rule a few lines, its fields in _rule's order: the table reads as a table only kept compact (fmt: skip).
RULES: tuple[Rule, ...] = (
    *IB_RULES,
    _rule(
        "ib-modify-qp-failed", "error", "Call to ibv_modify_qp",
        r"Call to ibv_modify_qp failed with (?!.*retrying \d)(?:error )?(?:\d+ )?(?P<why>[A-Za-z ]+)",  # a retry is not yet a failure
        "ibv_modify_qp failed ({why}) while connecting: the remote GID is not reachable from this NIC",
        "`show_gids` and set NCCL_IB_GID_INDEX to a routable RoCE v2 GID; NCCL_IB_HCA to ports on the same"
        " rail/subnet as the peer; test with `ib_write_bw -x <gid>`",
    ),
    _rule(
        "ib-no-device", "warning", "NET/IB : ",
        r"NET/IB : No device found|NET/IB : Unable to open device (?P<dev>\S+)",
        NO_RDMA, NO_RDMA_FIX,
    ),
    _rule("ib-no-device", "warning", "Call to ibv_open_device failed", r"Call to ibv_open_device failed", NO_RDMA, NO_RDMA_FIX),
    _rule(
        "gdr-disabled", "warning", "GPU Direct RDMA Disabled",
        r"GPU Direct RDMA Disabled for (?:HCA \d+ '(?P<hca>[\w-]+)'(?P<nomod> \(no module\))?|GPU (?P<gpu>\S+) / HCA)",
        "GPUDirect RDMA is off: data is staged through host memory",
        "load nvidia-peermem (or use DMA-BUF with a recent kernel, driver and NCCL); if the reason is PCIe"
        " distance, it is expected: put GPU and NIC under one switch",
    ),
    _rule(  # NCCL 2.32's ATTN (src/misc/param.cc, ncclLoadParam): a value that is not a number is dropped
        "nccl-invalid-param", "warning", "Invalid value",
        r"Invalid value (?P<value>.*?) for (?P<var>NCCL_\w+), using default (?P<default>-?\d+)",
        "NCCL ignored {var}={value}: not a number, so it runs with its default ({default})",
        "set that variable to a number, or unset it: NCCL ran with its default, not with what was meant",
    ),
    _rule(  # NCCL_RUN_DIAGNOSTICS=1 (2.31+): checks of the paths NCCL will use, run at init before any of the job's traffic
        "nccl-diag-issue", "warning", "NCCL DIAG [INFO]",
        r"NCCL DIAG \[INFO\]\s+(?P<what>.+)",
        "NCCL's diagnostics at communicator init report: {what}",
        "they ran before any of the job's traffic, so a failed check points at the system (the GPU pair, its NVLink or"
        " PCIe path, the driver), not the code: nvidia-smi topo -m and nvidia-smi nvlink -s for that pair; with"
        " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT the report names the pair and its path. [INFO] also marks a check"
        " that could not complete: read the line",
    ),
    _rule(  # RAS diagnostics (2.31+, src/ras/diagnostics_checks.cc): GPU inventory, driver and NCCL_* consistency
        "nccl-diag-mismatch", "warning", "mismatch across",
        r"\[INFO\]\s+(?P<check>[\w /.-]+?): (?:\w+ )?mismatch across (?P<n>\d+) ranks in comm (?P<comm>0x[0-9a-f]+), "
        r"rank\(s\) (?P<ranks>\{[^}]*\}(?: \(N=\d+\))?) differ from rank (?P<rank>\d+) \((?P<value>[^)]*)\)",
        "NCCL's RAS diagnostics: {check} differs on communicator rank(s) {ranks} of comm {comm} ({n} ranks) from "
        "rank {rank} ({value})",
        "make every node the same (driver, CUDA, GPU model, NCCL_* settings) before the job: the ranks that differ are"
        " the nodes to fix or drain; `ncclcheck env --json` on each node and compare",
    ),
    _rule(
        "no-socket-interface", "error", "no socket interface",
        r"no socket interface found",
        "NCCL found no network interface to bootstrap on",
        "bring an interface up, fix NCCL_SOCKET_IFNAME (`ncclcheck env` lists what NCCL would pick)",
    ),
    _rule(
        "address-family-mismatch", "error", "AF_INET",
        r"with family (?P<family>\d+) is neither AF_INET\(2\) nor AF_INET6\(10\)",
        "NCCL received a garbage peer address (family {family}): the peer had no interface to advertise",
        "NCCL_SOCKET_IFNAME must name an interface that exists on every node (`ncclcheck env` on each);"
        " every rank must run the same NCCL build",
    ),
    _rule(
        "connect-failed", "error", "Connect to ",
        r"Connect to (?P<addr>\S+?)<(?P<port>\d+)> (?:failed\s*:\s*|returned )(?P<why>.+)",
        "could not connect to {addr}:{port}: {why}",
        CONNECT_FIX,
    ),
    _rule(
        "connect-failed", "error", "onnect to ",
        r"(?:\w+: connect to |PollConnect to )(?P<addr>\S+?)<(?P<port>\d+)> failed(?:\s*:\s*| with error )(?P<why>.+)",
        "could not connect to {addr}:{port}: {why}",
        CONNECT_FIX,
    ),
    _rule(
        "connect-failed", "error", "exceeded error retry count",
        r"connect to (?P<addr>\S+?)<(?P<port>\d+)> returned (?P<why>[A-Za-z ]+?), exceeded error retry count",
        "could not connect to {addr}:{port}: {why}, and NCCL gave up after its retries",
        CONNECT_FIX,
    ),
    _rule(
        "connect-failed", "error", "exceeded error retry count",
        r"(?:\w+: connect returned (?P<why>[A-Za-z ]+?), |TryAccept: )exceeded error retry count"
        r"(?: after \d+ attempts, (?P<why2>.+)| \(\d+\)(?:, (?P<why3>.+))?)",
        "a peer connection kept failing ({why}) and NCCL gave up after its retries",
        CONNECT_FIX,
    ),
    _rule(  # printed while NCCL retries (once a second of refusals, each timed-out try); a retry its process never
        # completed an init after is connect-failed (``LogFold.result``); NCCL's giving up says "Connect to ... failed"
        "connect-retried", "info", "Call to connect returned",
        r"Call to connect returned (?P<why>Connection refused|Connection timed out)",
        "NCCL retried a connection to a peer: {why}",
        "nothing if the process then completed its init: a peer not listening yet; " + CONNECT_FIX,
    ),
    _rule(
        "connect-failed", "error", "Operation now in progress",
        r"socket\.cc:\d+ -> 2 \(Operation now in progress\)",
        "a bootstrap connection never completed (EINPROGRESS): packets to the peer are dropped",
        "open the ports between nodes (firewall), set NCCL_SOCKET_IFNAME to the routed interface on every node",
    ),
    _rule(
        "peer-closed", "error", "Connection closed by ",
        # "by peer" alone: torch's watchdog names none; gloo's "by peer [ADDR]:PORT" is peer-crashed's, named
        # NCCL 2.28's socketProgress says "by remote peer " and no address
        r"Connection closed by (?:remote peer(?: (?P<peer>[^\s<]+))?|peer\b(?! \[))",
        "a peer closed its connection ({peer}): usually that process exited",
        "a consequence: read the peer's log for its first error", True,
    ),
    _rule(  # proxy.cc 2.12-: each local rank's proxy connection closing, at every communicator's teardown too
        "proxy-peer-closed", "info", "[Service thread] Connection closed by localRank",
        r"\[Service thread\] Connection closed by localRank (?P<rank>\d+)",
        "NCCL's proxy service saw local rank {rank}'s connection close (a communicator's teardown, or that process"
        " ended)",
        "nothing on its own: every rank prints it when a communicator is destroyed; if the job failed, the first error"
        " of the rank named is the one to read",
    ),
    _rule(
        "peer-closed", "error", "Call to recv from",
        r"Call to recv from (?P<peer>\S+?)<\d+> failed : (?P<why>Connection reset by peer|Broken pipe)",
        "{why} from {peer}: the remote process died or the network reset",
        "a consequence: collect every rank's log; the earliest error wins", True,
    ),
    _rule(
        "peer-closed", "error", "Call to send to",
        r"Call to send to (?P<peer>\S+?)<\d+> failed : (?P<why>Connection reset by peer|Broken pipe)",
        "{why} sending to {peer}: the remote process died or the network reset",
        "a consequence: collect every rank's log; the earliest error wins", True,
    ),
    _rule(
        "duplicate-gpu", "error", "Duplicate GPU",
        r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device (?P<bus>[0-9a-f]+)",
        "ranks {a} and {b} use the same GPU (busId {bus})",
        "call torch.cuda.set_device(local_rank) before init_process_group; check --nproc-per-node against the"
        " visible GPUs (CUDA_VISIBLE_DEVICES)",
    ),
    _rule(
        "shm-failure", "error", "Error while ",
        r"Error while (?:creating|attaching to) shared memory segment (?P<seg>\S+)",
        "NCCL could not create its /dev/shm segment: /dev/shm is too small or full",
        "give the container a bigger /dev/shm (--shm-size=1g, --ipc=host, or a Memory emptyDir in Kubernetes);"
        " NCCL_SHM_DISABLE=1 only as a slower workaround",
    ),
    _rule(
        "shm-failure", "error", "failed to extend /dev/shm",
        r"failed to extend (?P<seg>/dev/shm/\S+) to (?P<size>\d+) bytes",
        "NCCL could not grow {seg} to {size} bytes: /dev/shm is too small or full",
        "give the container a bigger /dev/shm (--shm-size=1g, --ipc=host, or a Memory emptyDir in Kubernetes)",
    ),
    _rule(
        "cuda-oom", "error", "Cuda failure", r"Cuda failure (?:\d+ )?'out of memory'", OOM, OOM_FIX,
    ),
    _rule(
        "duplicate-rank", "error", "has already checked in",
        r"Bootstrap Root ?: rank (?P<rank>\d+) of (?P<n>\d+) ranks has already checked in",
        "two processes claim global rank {rank} (of {n}): NCCL's bootstrap root saw it check in twice",
        "a second launch of the same job (a node started twice, two launchers, a stale process from an earlier"
        " run) or the same NODE_RANK / --node-rank on two nodes: check each node's RANK, NODE_RANK and launch"
        " command, and end stale processes (`ncclcheck watch` lists the jobs on a node)",
    ),
    _rule(
        "nranks-mismatch", "error", "mismatch in rank count",
        r"Bootstrap Root ?: mismatch in rank count from procs (?P<a>\d+) ?: ?(?P<b>\d+)",
        "the processes disagree on the world size ({a} vs {b}) when the communicator is created",
        "every process must get the same WORLD_SIZE (nnodes x nproc-per-node): compare the launch command and"
        " environment on every node",
    ),
    _rule(
        "launcher-terminated", "error", "SignalException",
        r"SignalException: Process (?P<pid>\d+) got signal: (?P<sig>\d+)",
        "torchrun (pid {pid}) was ended from outside by signal {sig} (scancel, a time limit, a user, a watchdog):"
        " the job was probably hung or out of time",
        "where the ranks were is the cause: `ncclcheck run`'s hang records, Flight Recorder dumps and each rank's"
        " last lines; under SLURM `sacct -j JOB` says TIMEOUT or CANCELLED",
    ),
    _rule(
        "model-oom", "error", "CUDA out of memory",
        r"CUDA out of memory\.?(?: Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B))?",
        "the model ran out of GPU memory (PyTorch's caching allocator could not allocate {size}): not NCCL",
        "lower the batch or sequence length, use activation checkpointing or sharding (FSDP/ZeRO); set"
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation; the other ranks' NCCL errors"
        " and timeouts are echoes of this rank leaving",
    ),
    _rule(
        "host-oom-killed", "error", "kill event",
        r"Detected (?P<n>\d+) oom[_-]kill events?(?:\(s\))?",
        "the kernel's OOM killer ended {n} process(es) of the job on this node (host memory, not GPU memory)",
        HOST_OOM_FIX,
    ),
    _rule(
        "host-oom-killed", "error", "Out Of Memory",
        r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,\-]+): Out Of Memory",
        "SLURM task {task} on {host} was killed for using too much host memory",
        HOST_OOM_FIX,
    ),
    _rule(
        "cuda-error", "error", "Cuda failure",
        r"Cuda failure (?:\d+ )?'(?P<what>invalid argument)'",
        "a CUDA call inside NCCL failed: '{what}'",
        "the known causes: a virtualised GPU or container without CUDA VMM support rejecting NCCL's cuMem"
        " allocations (try NCCL_CUMEM_ENABLE=0), two ranks on one GPU (each rank must call"
        " torch.cuda.set_device(local_rank)), or a driver older than the CUDA runtime (nvidia-smi vs torch.version.cuda)",
    ),
    _rule(
        "cuda-error", "error", "Cuda failure",
        r"Cuda failure (?:\d+ )?'(?P<what>invalid device ordinal)'",
        "a CUDA call inside NCCL failed: '{what}': a rank chose a GPU this process cannot see",
        "--nproc-per-node must not exceed the visible GPUs: check CUDA_VISIBLE_DEVICES and that each rank calls"
        " torch.cuda.set_device(local_rank)",
    ),
    _rule(
        "cuda-error", "error", "Cuda failure",
        r"Cuda failure (?:\d+ )?'(?P<what>(?!out of memory|invalid argument|invalid device ordinal|an illegal memory"
        r" access|unspecified launch failure|uncorrectable ECC)[^']+)'",
        "a CUDA call inside NCCL failed: '{what}'",
        "a GPU or driver problem under NCCL: `nvidia-smi` and `dmesg | grep -i xid` on the node; the same job on"
        " one GPU tells NCCL from the device",
    ),
    _rule(
        "ofi-error", "error", "NET/OFI",
        r"NET/OFI (?P<what>[^\n]*?)\.? RC: (?P<rc>-?\d+), ERROR: (?P<err>.+)",
        "the libfabric network plugin (aws-ofi-nccl) failed: {what}: {err} (RC {rc})",
        OFI_FIX,
    ),
    _rule(
        "ofi-error", "error", "NET/OFI",
        r"NET/OFI (?P<what>Unable to find a protocol that worked|Couldn't find any optimal provider)",
        "the libfabric network plugin (aws-ofi-nccl) found no usable provider: {what}",
        OFI_FIX,
    ),
    _rule(
        "ras-dead-rank", "error", "considered dead",
        r"(?P<n>\d+) job process(?:es)? (?:is|are) considered dead \(unreachable via the RAS network\)",
        "NCCL RAS: {n} process(es) of the job are dead (unreachable via the RAS network)",
        "the missing rank(s) RAS lists are the cause: their node's dmesg (OOM killer, Xid), their own log",
    ),
    _rule(
        "ras-dead-rank", "error", "The missing rank",
        r"The missing ranks?: (?P<who>[\d, ]+)",
        "NCCL RAS: rank(s) {who} sent no data: dead or unreachable",
        "the missing rank(s) are the cause: their node's dmesg (OOM killer, Xid), their own log",
    ),
    _rule(
        "ras-dead-rank", "error", "PEER_DEAD",
        r"PEER_DEAD: Process (?P<pid>\d+) on node (?P<node>\S+) managing GPU (?P<gpu>\d+)",
        "NCCL RAS: process {pid} on {node} (GPU {gpu}) died",
        "its node's dmesg (OOM killer, Xid) and its own log say why; the others' errors are echoes",
    ),
    _rule(
        "ras-all-ok", "info", "RUNNING",
        r"^\s*(?P<group>\d+)\s+(?P<comms>\d+)\s+\d+\s+[\d-]+\s+\d+\s+(?P<ranks>\d+)\s+RUNNING\s+OK\s*$",
        "NCCL RAS: communicator group {group} ({comms} communicator(s), {ranks} ranks) is RUNNING with no error: every"
        " rank alive, none missing, the same collective counts on all",
        "RAS compares how many collectives each rank launched and whether its process answers; it does not see the"
        " data path. All agreeing rules out a dead rank and a rank that skipped a collective when the report was"
        " taken. On one node NCCL 2.27+ RAS counts are always 0 (NCCL PR #2021): there it rules out less",
    ),
    _rule(
        "ras-count-mismatch", "warning", "have different",
        r"Communicator ranks have different (?P<what>(?:\w+ )?(?:collective )?operation counts)",
        "NCCL RAS: the ranks of a communicator have different {what}: normal while the job runs, a hang when"
        " repeated reports do not change",
        "query RAS again (or `ncclcheck watch`): counts that do not move mean the ranks RAS lists as behind are stuck",
    ),
    _rule("cuda-oom", "error", "Failed to CUDA calloc", r"Failed to CUDA calloc (?:async )?(?P<size>\d+) bytes", OOM, OOM_FIX),
    _rule(
        "p2p-unsupported", "error", "peer access is not supported",
        r"peer access is not supported between these two devices",
        "CUDA peer access between these GPUs fails although NCCL chose P2P",
        "export NCCL_P2P_DISABLE=1 (falls back to SHM); check `nvidia-smi topo -p2p r`, IOMMU and ACS",
    ),
    _rule(
        "p2p-disabled", "warning", "P2P is disabled",
        r"P2P is disabled between connected GPUs (?P<a>\d+) and (?P<b>\d+)",
        "P2P is disabled between connected GPUs {a} and {b}",
        "unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL unless P2P is really broken",
    ),
    _rule(
        "nccl-system-error", "error", "NCCL error",
        r"NCCL error(?: in: \S+?:\d+)?[,:] (?P<what>unhandled system error|unhandled cuda error|internal error|invalid"
        r" usage|remote process exited or there was a network error|invalid argument)",
        "NCCL failed: {what}",
        "read the 'Last error' line and the first NCCL WARN before it; if it is empty, rerun with NCCL_DEBUG=INFO",
    ),
    _rule(
        "collective-timeout", "error", "Watchdog caught collective operation timeout",
        r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)",
        "collective {op} (SeqNum {seq}) timed out",
        "the ranks that did not report this timeout are the suspects: py-spy them (`ncclcheck watch` on a live"
        " job); a raised timeout only hides a straggler",
    ),
    _rule(
        "collective-timeout", "error", "Timeout at NCCL work",
        r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: \d+, last completed NCCL work: \d+",
        "NCCL work {seq} timed out",
        "the ranks that did not report this timeout are the suspects; compare the SeqNum across ranks",
    ),
    _rule(
        "desync-report", "error", "joined but didn't finish",
        r"\[(?P<who>\d+(?:, \d+)*)\] joined but didn't finish collective #(?P<seq>\d+)",
        "torch's desync report: rank(s) {who} joined collective #{seq} but never finished it",
        DESYNC_FIX,
    ),
    _rule(
        "desync-report", "error", "but didn't join collective",
        r"\[(?P<who>\d+(?:, \d+)*)\] finished collective #(?P<done>\d+), but didn't join collective #(?P<seq>\d+)",
        "torch's desync report: rank(s) {who} finished collective #{done} but never joined #{seq}",
        DESYNC_FIX,
    ),
    _rule(
        "desync-report", "error", "are the lagging ranks",
        r"ranks \[(?P<who>[\d, ]+)\] are the lagging ranks that caused this timeout",
        "torch's desync report: rank(s) {who} never joined any collective: they lag or died",
        DESYNC_FIX,
    ),
    _rule(  # ProcessGroupGloo::monitoredBarrier (dist.monitored_barrier): rank 0 names the ranks that never came
        logs_ids.MONITORED_BARRIER_FAILED, "error", "failed to pass monitoredBarrier",
        r"Ranks? (?P<who>\d+(?:, \d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms",
        "monitored_barrier: rank(s) {who} never reached the barrier within {ms} ms (the rank that says so only waited)",
        "the named ranks are stuck before the barrier or died: read their own output and py-spy them (`ncclcheck"
        " watch` on a live job); the other ranks' errors after it are echoes",
    ),
    _rule(  # printed only after a collective failed on this rank: an echo of that failure, never a pass alone
        "failed-collective-no-stack", "error", "Stack trace of the failed collective not found",
        r"Stack trace of the failed collective not found",
        "a collective failed on this rank and the Flight Recorder was off: its call site is not in these logs",
        "the watchdog's timeout or error next to it says which collective; for its call site set TORCH_FR_BUFFER_SIZE"
        "=2000 (TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.8), or run the job under `ncclcheck run`, which sets it",
        True,
    ),
    _rule(
        "gloo-timeout", "error", "Timed out waiting",
        r"Timed out waiting (?P<ms>\d+)ms for (?P<op>[\w/]+) operation to complete",
        "gloo timed out after {ms} ms waiting for a peer's {op}",
        "the ranks that timed out waited; the ranks that did not are the suspects: see what they were doing"
        " (their last lines, `ncclcheck watch` on a live job); a longer timeout only hides a straggler",
    ),
    _rule(
        "watchdog-stuck", "error", "Heartbeat monitor timed out",
        r"Heartbeat monitor timed out! Process will be terminated",
        "torch's heartbeat monitor found the ProcessGroupNCCL watchdog stuck and ends the process",
        "debug the timeout before it; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC / TORCH_NCCL_ENABLE_MONITORING only change"
        " this abort", True,
    ),
    _rule(
        "watchdog-stuck", "error", "watchdog got stuck",
        r"watchdog got stuck for (?P<s>\d+) seconds",
        "the ProcessGroupNCCL watchdog itself was stuck for {s} s (blocked in CUDA/NCCL while aborting)",
        "debug the timeout before it; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC / TORCH_NCCL_ENABLE_MONITORING only change"
        " this abort", True,
    ),
    _rule(
        "store-port-in-use", "error", "The server socket has failed to listen",
        r"The server socket has failed to listen on any local network address\.(?: port: (?P<port>\d+)"
        r"| The server socket has failed to bind to \S*?:(?P<port2>\d+) )?.*?"
        r"(?:EADDRINUSE|[Aa]ddress already in use)",
        "the store/rendezvous port {port} is already taken on this node: the c10d store could not listen",
        "another job, a second \"rank 0\" or a process left from an earlier run holds the port: find it with"
        " `ss -ltnp 'sport = :PORT'` (the port above); end it, or give this job another --master-port / --rdzv-endpoint port",
    ),
    _rule(  # TCPStore.cpp (the store's server, on rank 0 or the agent): "Timed out after {} seconds waiting for
        # clients. {}/{} clients joined."
        logs_ids.STORE_CLIENTS_MISSING, "error", "seconds waiting for clients",
        r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<total>\d+) clients joined",
        "the c10d store waited {s} s for its clients and only {joined} of {total} joined: a rank or node never"
        " reached it (the store's host only waited)",
        "the ranks that never connected did not start, died before init_process_group, or cannot reach"
        " MASTER_ADDR:MASTER_PORT: read their own logs (scheduler, container) and check the address from their node"
        " (`ncclcheck env --master-addr HOST --master-port PORT`)",
    ),
    _rule(  # socket.cpp: what torch says when it gives up (thrown, or logged at E before the throw)
        "store-connect-failed", "error", "The client socket has",
        r"The client socket has (?:timed out after (?P<t>\d+)(?:ms|s) while trying to connect to|failed to connect to"
        r" any network address of) \(?(?P<host>[^,\s)]+),? ?(?P<port>\d+)?",
        "could not reach the c10d store (rendezvous) at {host}:{port}",
        "MASTER_ADDR / --rdzv-endpoint must be an address every node routes to (not docker's 172.17.x, not a"
        " container-id hostname); open the port; `ncclcheck env --master-addr HOST --master-port PORT` checks it",
    ),
    _rule(
        "store-connect-failed", "error", "TCP client failed",
        r"TCP client failed to connect/validate to host (?P<host>\S+?):(?P<port>\d+)(?!\d| - retrying)",
        "could not reach the c10d store (rendezvous) at {host}:{port}",
        "check MASTER_ADDR/MASTER_PORT routing and the firewall; `ncclcheck env --master-addr HOST` checks it",
    ),
    # socket.cpp's and TCPStore.cpp's warnings at each attempt while torch retries (printed by healthy jobs whose
    # store was not up yet); torch gives up with the errors above, which a failed connection always prints
    _rule(
        "store-connect-retried", "warning", "The client socket has failed to connect to [",
        r"The client socket has failed to connect to \[(?P<host>[^\]\s]+)\]:(?P<port>\d+)",
        "torch retried connecting to the c10d store (rendezvous) at {host}:{port}: it was not up yet, or not reachable",
        STORE_RETRY_FIX,
    ),
    _rule(
        "store-connect-retried", "warning", "TCP client failed",
        r"TCP client failed to connect/validate to host (?P<host>\S+?):(?P<port>\d+) - retrying",
        "torch retried connecting to the c10d store (rendezvous) at {host}:{port}: it was not up yet, or not reachable",
        STORE_RETRY_FIX,
    ),
    _rule(
        "store-connection-lost", "error", "store->get(",
        r"store->get\('(?P<key>\w+)'\) got error: (?P<why>.+)",
        "the c10d store connection broke: the store host (rank 0 / MASTER_ADDR) went away",
        STORE_LOST_FIX, True,
    ),
    _rule(
        "store-connection-lost", "error", "failed on SocketImpl",
        r"recvValue\w* failed on SocketImpl\(.*?remote=\[?(?:::ffff:)?(?P<host>[^\]\s]*?)\]?:(?P<port>\d+)\)",
        "the c10d store connection broke: the store host {host}:{port} went away",
        STORE_LOST_FIX, True,
    ),
    _rule(  # ProcessGroupNCCL's heartbeat monitor asking the store (its own error after "with error:"); printed at a
        # job's end too, when the store's host left first: a job torchrun saw finish survives it (restarts.py)
        "store-connection-lost", "error", 'Failed to check the "should dump" flag',
        r'Failed to check the "should dump" flag on TCPStore.*?with error: (?P<why>(?!Failed to recv).+)',
        "the c10d store connection broke ({why}): the store host (rank 0 / MASTER_ADDR) went away",
        STORE_LOST_FIX, True,
    ),
    _rule(
        "store-connection-lost", "error", "Did the remote server shutdown",
        r"Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server shutdown or crash",
        "the c10d store connection broke: the store host (rank 0 / MASTER_ADDR) went away",
        STORE_LOST_FIX, True,
    ),
    _rule(
        "collective-mismatch", "error", "Detected mismatch between collectives",
        r"Detected mismatch between collectives on ranks\. Rank (?P<a>\d+) is running collective: .*?OpType=(?P<opa>\w+)"
        r".*?but Rank (?P<b>\d+) is running collective: .*?OpType=(?P<opb>\w+)",
        "ranks call different collectives: rank {a} runs {opa} while rank {b} runs {opb}",
        "make every rank issue the same collectives in the same order (look for rank-dependent branches)",
    ),
    _rule(  # gloo's tcp pair: GLOO_ENFORCE_LE's condition, then (gloo 2025-07 on) "Received data size doesn't match
        # expected size": the condition makes it gloo's, where the sentence alone is said by many other programs
        "collective-mismatch", "error", "op.preamble.length <= op.nbytes",
        r"\] op\.preamble\.length <= op\.nbytes\. \d+ vs \d+",
        "gloo received a message of the wrong size: the ranks ran different collectives or sizes",
        "make every rank issue the same collectives with the same shapes; TORCH_DISTRIBUTED_DEBUG=DETAIL names them",
    ),
    _rule(  # ProcessGroupGloo.cpp's argument checks (assertSizesMatch, assertTypeMatch, ...): TORCH_CHECK, a
        # ValueError before torch 1.x's std::invalid_argument became one; raised by the rank's own call
        "collective-mismatch", "error", "ProcessGroupGloo::",
        r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ProcessGroupGloo::(?P<op>\w+): (?P<what>invalid"
        r" (?:tensor (?:size|type|layout)|size of output tensor|output tensor list) at index \d+)"
        r" \(expected (?P<want>.+?), got (?P<got>.+)\)\s*$",
        "gloo refused this rank's {op} before any data moved ({what}: expected {want}, got {got}): the tensors its"
        " call passed disagree in size or type, so the other ranks' errors are echoes of it",
        "at the call site named: a collective's tensors must agree (each output of the input's shape and dtype in"
        " all_gather and gather, every tensor of a list alike); a size that differs between ranks (a short last"
        " batch) needs padding to one size (all_gather the sizes first) or all_gather_object",
        own=True,
    ),
    _rule(
        "ddp-unused-parameters", "error", "Expected to have finished reduction",
        r"Expected to have finished reduction in the prior iteration",
        "DDP: some parameters got no gradient, so the gradient all-reduce never finished",
        "pass find_unused_parameters=True to DistributedDataParallel, or make every parameter take part in the"
        " loss; TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameters",
    ),
    _rule(
        "peer-crashed", "error", " by peer",
        r"Read error \[(?P<peer2>[^\]\s]+)\]:\d+: Connection reset by peer|Connection (?:closed|reset) by peer \[?(?P<peer>[^\]\s]*)",
        "a peer process closed the gloo connection ({peer}): it crashed or exited",
        "a consequence on this rank: find the rank that died first (torchrun's root cause, its stderr)", True,
    ),
    _rule(
        "peer-crashed", "error", "Broken pipe",
        r"writev \[(?P<peer>[^\]\s]+)\]:\d+: Broken pipe",  # gloo's tcp/pair.cc: "writev " + peer + strerror
        "a peer process closed the gloo connection ({peer}) while this rank wrote to it: it crashed or exited",
        "a consequence on this rank: find the rank that died first (torchrun's root cause, its stderr)", True,
    ),
    _rule(
        "peer-crashed", "error", "remote process exited",
        r"remote process exited or there was a network error",
        "a peer process exited or the network failed",
        "find the first error on the peer's node; check node health and the NICs", True,
    ),
    _rule(
        "proxy-failed", "error", "Failed to execute operation",
        r"\[Proxy Service (?P<rank>\d+)\] Failed to execute operation (?P<op>\w+) from rank (?P<peer>\d+), retcode"
        r" (?P<code>\d+)",
        "NCCL's proxy thread could not {op} for rank {peer} (retcode {code})",
        "a consequence of a transport or bootstrap error: the first NET/IB/socket error in the logs is the cause",
        True,
    ),
    _rule(
        "proxy-failed", "error", "failed while polling for opId",
        r"Socket recv failed while polling for opId=(?P<op>\w+)",
        "NCCL's proxy lost its socket while waiting for an operation",
        "a consequence: a peer process exited or its connection broke; find the first error", True,
    ),
    _rule(
        "watchdog-exception", "error", "detected by watchdog at work",
        r"Exception \(either an error or timeout\) detected by watchdog at work: (?P<seq>\d+)",
        "torch's watchdog saw collective #{seq} fail or time out",
        "a consequence: the timeout or NCCL error next to it says which; the rank that never joined is the cause",
        True,
    ),
    _rule(
        "watchdog-exception", "error", "failure detected by watchdog at work sequence id",
        r"failure detected by watchdog at work sequence id: (?P<seq>\d+) PG status: last enqueued work: (?P<e>-?\d+),"
        r" last completed work: (?P<c>-?\d+)",
        "torch's watchdog saw work #{seq} fail (last enqueued {e}, last completed {c})",
        "a consequence: the timeout or NCCL error next to it says which; the rank that never joined is the cause",
        True,
    ),
    _rule(
        "process-taken-down", "error", "taking the entire process down",
        r"To avoid data inconsistency, we are taking the entire process down",
        "torch's watchdog took the process down after a collective failed or timed out",
        "a consequence: the timeout or NCCL error next to it is the one to read", True,
    ),
    _rule(
        "process-taken-down", "error", "Some NCCL operations have failed",
        r"Some NCCL operations have failed or timed out",
        "torch's watchdog took the process down after a collective failed or timed out",
        "a consequence: the timeout or NCCL error next to it is the one to read", True,
    ),
    _rule(
        logs_ids.SLURM_TASK_ENDED, "error", "srun: error: ",
        r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,\-\[\]]+): (?P<how>Exited with exit code \d+|Terminated|Killed|Segmentation fault|Bus error|Aborted)",
        "SLURM: task {task} on {host}: {how}",
        "a consequence: that task's own output (its traceback, a signal, an error above) says why it ended", True,
    ),
    _rule(
        "slurm-cancelled", "error", "CANCELLED AT",
        r"slurmstepd: error: \*\*\* (?P<what>STEP|JOB) (?P<id>\S+) ON (?P<host>\S+) CANCELLED AT (?P<at>\S+)(?!\S| DUE TO )",
        "SLURM cancelled {what} {id} on {host} at {at}",
        "it was ended from outside: scancel, its time limit (the line then ends DUE TO TIME LIMIT: raise --time or"
        " checkpoint more often), preemption or a node failure; `sacct -j <job> -o JobID,State,Reason,ExitCode` says which",
    ),
    _rule(
        "process-aborted", "error", "terminate called after throwing",
        r"terminate called after throwing an instance of '(?P<type>[^']+)'",
        "the process aborted on an uncaught {type} (torch's watchdog rethrows a collective's failure to end it)",
        "a consequence: the exception's message (the lines above it) is the error to read", True,
    ),
    _rule(
        "nccl-result", "error", "Error: ",
        r"^(?P<type>nccl(?:UnhandledCuda|System|Internal|InvalidArgument|InvalidUsage|Remote)Error): (?P<what>.{1,200})",
        "NCCL returned {type}: {what}",
        "a consequence: the exception line above it says which call failed, and NCCL's WARN lines (NCCL_DEBUG=WARN)"
        " say why", True,
    ),
    _rule(  # nccl-tests' last line (common.cu): "# Out of bounds values : %d %s" (OK, or FAILED when #wrong > 0)
        "nccl-tests-wrong", "error", "Out of bounds values",
        r"Out of bounds values : (?P<n>[1-9]\d*) FAILED",
        "nccl-tests found {n} wrong value(s): a collective delivered corrupted data (the #wrong columns say which sizes)",
        "not a hang but bad data: a GPU's memory, NVLink, PCIe or a NIC's GPUDirect path, or a broken NCCL build; rerun"
        " to see whether the same sizes fail, narrow the path (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1,"
        " NCCL_NET_GDR_LEVEL=0 one at a time) and read the node's dmesg for Xid errors",
    ),
    _rule(
        "nccl-tests-failed", "error", "Test NCCL failure",
        r"Test (?P<what>NCCL|CUDA) failure (?P<src>\S+) '(?P<why>[^']*)'",
        "nccl-tests stopped: an {what} call failed ({why}, at {src})",
        "a consequence: the NCCL WARN lines before it (NCCL_DEBUG=WARN) say what failed", True,
    ),
    _rule(  # ProcessGroupNCCL.cpp: the watchdog's failure path asks every rank to dump its Flight Recorder
        "fr-dump-signalled", "error", "dump",
        r"(?P<what>First PG on this rank to signal dumping|preparing to dump debug info|Received a dump signal"
        r"|Observed flight recorder dump signal from another rank)",
        "torch's watchdog, after the failure, signalled a debug dump ({what})",
        "a consequence: the watchdog's timeout or error next to it is the one to read; with"
        " TORCH_NCCL_TRACE_BUFFER_SIZE>0 each rank's Flight Recorder dump (`ncclcheck logs` reads it) names the"
        " collective each rank was in", True,
    ),
    _rule(  # srun (every release in use): printed for every step that is cancelled or whose task failed
        "slurm-step-aborted", "error", "srun: Job step aborted",
        r"srun: Job step aborted: Waiting up to (?P<s>\d+) seconds for job step to finish",
        "SLURM's srun is aborting the job step (it waits up to {s} s for the tasks to end)",
        "a consequence: the cancel (slurmstepd's CANCELLED line) or the task that failed first is the one to read", True,
    ),
    _rule(
        logs_ids.SLURM_TASK_ENDED, "error", "srun: Force Terminated",
        r"srun: Force Terminated (?P<task>(?:job|StepId=)\S*)",
        "SLURM: srun force-terminated {task}",
        "a consequence: that task's own output (its traceback, a signal, an error above) says why it ended", True,
    ),
    _rule(  # a shell's `echo "exit $?"`, kubectl exec's own line, a runner's: the status of a command that ended
        "exit-status", "error", "exit",
        r"^(?:exit(?: code| status)?|exited with (?:exit )?(?:code|status)|command terminated with exit code)"
        r" (?P<code>[1-9]\d*)\.?$",
        "a command ended with exit status {code} (above 128: killed by signal status-128, 137 SIGKILL, 139 SIGSEGV)",
        "a consequence: the lines before it (its traceback, a crash, a signal) say why it ended", True,
    ),
)  # fmt: skip
# NCCL's error trail: read from every NCCL line by the per-rank NCCL view (nccl.py, cached per message, no rule pass
# per line), said only when no other line reports an error; these rules word it, per result code
TRAIL_RULES: tuple[Rule, ...] = (
    _rule(
        "nccl-error-trail", "error", " -> 1",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 1(?:\s|$)",
        "an NCCL call failed: a CUDA call failed (ncclUnhandledCudaError), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
    _rule(
        "nccl-error-trail", "error", " -> 2",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 2(?:\s|$)",
        "an NCCL call failed: a system call or the network failed (ncclSystemError), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
    _rule(
        "nccl-error-trail", "error", " -> 3",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 3(?:\s|$)",
        "an NCCL call failed: NCCL hit an internal error (ncclInternalError), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
    _rule(
        "nccl-error-trail", "error", " -> 4",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 4(?:\s|$)",
        "an NCCL call failed: NCCL was given an invalid argument (ncclInvalidArgument), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
    _rule(
        "nccl-error-trail", "error", " -> 5",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 5(?:\s|$)",
        "an NCCL call failed: NCCL was used wrongly (ncclInvalidUsage), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
    _rule(
        "nccl-error-trail", "error", " -> 6",
        r"^(?P<src>[\w./-]+\.(?:cc|cu|cpp|h|c):\d+) -> 6(?:\s|$)",
        "an NCCL call failed: a remote peer failed or went away (ncclRemoteError), returned up NCCL's calls (its error trail, from {src})",
        TRAIL_FIX, True,
    ),
)  # fmt: skip
RULES += SETUP_RULES + GPU_RULES + EXIT_RULES
SECONDARY_IDS = frozenset(r.id for r in RULES if r.secondary)
# srun's line for a task that ended (``how``: its exit code or signal), as the verdict reads the order of the ends
TASK_ENDED = next(r for r in RULES if r.id == logs_ids.SLURM_TASK_ENDED and r.literal == "srun: error: ")
