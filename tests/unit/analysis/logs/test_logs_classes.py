"""The failure classes of issue 25, rule by rule: each fires on its real line and stays quiet on the near misses.

Every input is a real line: from tests/fixtures (the excerpt named), or a line users posted publicly (the
comment says where), or the message format of the emitter's source filled in (the comment names the file; the
catalogue row in ncclcheck/data/messages.tsv gives the version range).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport

MORE = FIXTURES / "nccl_logs_more"


def read(*lines: str) -> LogReport:
    return analyse(frame_all(lines, "x.log"))


def found(*lines: str) -> dict[str, Finding]:
    return {f.id: f for f in read(*lines).findings}


def excerpt_lines(name: str) -> list[str]:
    (path,) = MORE.glob(f"{name}_*.log")
    return path.read_text(encoding="utf-8").splitlines()


# (line, the finding id it gives, a piece of the message that names the line's specifics)
FIRES = [
    # NVIDIA Xid lines (the driver's format: src/nvidia/src/kernel/gpu/rc/kernel_rc.c)
    ("kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)", "gpu-xid", "Xid 145"),  # M33
    # a user's kmsg test in a public repository (find_string), an old driver's format
    (
        "NVRM: Xid (0000:af:00): 48, pid='<unknown>', name=<unknown>, Ch 00000008",
        "gpu-xid",
        "Xid 48 on GPU 0000:af:00:",
    ),
    # a public dmesg paste (find_string)
    (
        "[315911.559820] NVRM: Xid (PCI:0000:03:00): 31, pid=12083, name=chrome, Ch 00000010, intr 10000000. MMU Fault:"
        " ENGINE CE0 HUBCLIENT_CE0 faulted @ 0x0_04a00000. Fault is of type FAULT_INFO_TYPE_UNSUPPORTED_KIND"
        " ACCESS_TYPE_WRITE",
        "gpu-xid-program",
        "Xid 31 on GPU 0000:03:00: GPU memory page fault",
    ),
    # stas00/ml-engineering compute/accelerator/nvidia/debug.md
    (
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "gpu-xid-notice",
        "Xid 63 on GPU 0000:10:1c: GPU memory remapping event",
    ),
    (
        "kernel: NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error",
        "gpu-xid-notice",
        "137",
    ),
    # a public journalctl line (search: an Xid not in ncclcheck's table)
    (
        "Oct 01 13:00:00 hostname kernel: NVRM: Xid (PCI:0000:06:00): 41, ROBUST_CHANNEL_CE2_ERROR: Copy Engine Exception",
        "gpu-xid-unknown",
        "Xid 41 on GPU 0000:06:00: a GPU event ncclcheck has no meaning for",
    ),
    (
        "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
        "gpu-fallen-off-bus",
        "GPU 0000:02:00 fell",
    ),
    # Modal's GPU health docs (the pid/name form)
    (
        "[gpu-health] [CRITICAL] GPU-1234: XID: NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has"
        " fallen off the bus.",
        "gpu-fallen-off-bus",
        "GPU 0000:c6:00 fell off the PCIe bus (Xid 79)",
    ),
    # NVIDIA/open-gpu-kernel-modules issue 1151, and an older driver's wording (a public pastebin)
    (
        "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        "gpu-fallen-off-bus",
        "0000:2b:00.0",
    ),
    ("[ 1936.510073] NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "gpu-fallen-off-bus", "GPU 0000:01:00.0 fell"),
    (
        "               NVRM: fallen off the bus and is not responding to commands.",
        "gpu-fallen-off-bus",
        "no Xid",
    ),  # M32
    # CUDA's sticky errors (M34, M35)
    (
        "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: CUDA error: uncorrectable"
        " ECC error encountered",
        "gpu-ecc-error",
        "CUDA error 214",
    ),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu-ecc-error", "uncorrectable ECC"),  # M34
    (
        "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an illegal"
        " memory access was encountered",
        "cuda-illegal-address",
        "CUDA error 700",
    ),
    (
        "RuntimeError: CUDA error: unspecified launch failure",
        "cuda-launch-failure",
        "CUDA error 719",
    ),  # c10's CUDA check
    # PCIe AER (M31)
    (
        "[74889.542044] pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer,"
        " id=0010(Receiver ID)",
        "pcie-aer-uncorrected",
        "uncorrected PCIe error (Fatal, Transaction Layer) at 0000:00:02.0",
    ),
    (
        "[74889.542031] pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010",
        "pcie-aer-uncorrected",
        "Fatal",
    ),
    (
        "[74889.542184] pcieport 0000:00:02.0:    [ 5] Surprise Down Error    (First)",
        "pcie-aer-uncorrected",
        "Surprise Down",
    ),
    (
        "[74785.660380] pcieport 0000:00:02.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, id=0010(Transmitter"
        " ID)",
        "pcie-aer-corrected",
        "corrected PCIe error (Data Link Layer) at 0000:00:02.0",
    ),
    # native crash banners (M28, M30, M38, M39), UCX's segfault form (src/ucs/debug/debug.c), the shell's
    ("[09677202c889:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)", "native-crash", "SIGBUS"),
    (
        "[node3:41234:0:41299] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
        "native-crash",
        "process 41234 on node3 crashed: signal 11 (Segmentation fault)",
    ),
    ("[1,0]<stderr>:[1a62e574072d:00334] Signal: Bus error (7)", "native-crash", "process 00334 on 1a62e574072d"),
    ("[rtptest1621:405884] *** Process received signal ***", "native-crash", "process 405884 on rtptest1621"),
    ("Fatal Python error: Segmentation fault", "native-crash", "Segmentation fault"),
    ("Segmentation fault (core dumped)", "native-crash", "Segmentation fault (the shell's report)"),
    ("Bus error (core dumped)", "native-crash", "SIGBUS"),
    # SIGKILL as the shell reports it (bash jobs.c: strsignal's "Killed", bare or a script's job line), and docker
    # compose's exit of an attached container: no crash, but the process is gone (the OOM killer, kill -9)
    ("Killed", "process-killed", "SIGKILL"),
    (
        "/var/spool/slurmd/job01234/slurm_script: line 5: 12345 Killed                  torchrun --nproc-per-node 2"
        " train.py",
        "process-killed",
        "SIGKILL",
    ),
    ("trainer-1 exited with code 137", "container-killed", "the container trainer-1 ended with exit code 137"),
    ("trainer-1 exited with code 139", "container-killed", "139 SIGSEGV"),
    ("==== backtrace (tid:  25645) ====", "native-backtrace", "thread 25645"),
    ("(RayWorkerVllm pid=7046) Fatal Python error: Aborted", "process-aborted", "SIGABRT"),
    # SLURM: public job logs (find_string), and the formats of src/slurmd/slurmstepd/req.c
    (
        "slurmstepd: error: *** JOB 13324410 ON cdr798 CANCELLED AT 2021-09-07T15:44:06 DUE TO TIME LIMIT ***",
        "slurm-time-limit",
        "SLURM ended JOB 13324410 on cdr798: it reached its time limit (at 2021-09-07T15:44:06)",
    ),
    (
        "slurmstepd: error: *** JOB 81234 ON node7 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD"
        " LOG FOR DETAILS ***",
        "slurm-node-failure",
        "a node of the job failed",
    ),
    (
        "slurmstepd: error: *** JOB 81234 ON node7 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION ***",
        "slurm-preempted",
        "JOB 81234 on node7",
    ),
    # the kernel's OOM killer (mm/oom_kill.c), Kubernetes (kubectl describe, the kubelet's eviction message)
    (
        "[ 6754.190349] Out of memory: Killed process 23012 (python) total-vm:63458532kB, anon-rss:51718016kB,"
        " file-rss:67224kB, shmem-rss:12288kB, UID:1000 pgtables:103476kB oom_score_adj:0",
        "host-oom-killed",
        "killed process 23012 (python)",
    ),
    ("      Reason:       OOMKilled", "k8s-oom-killed", "OOMKilled"),
    ("      Reason:       Evicted", "k8s-evicted", "evicted"),
    ("Message:          The node was low on resource: memory. ", "k8s-evicted", "low on memory"),
    ("      Exit Code:    137", "container-killed", "exit code 137 (128 + 9, SIGKILL)"),
    ("      Exit Code:    139", "container-killed", "exit code 139"),
    # torchrun's agent (M22-M25; torch/distributed/elastic)
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "rendezvous-closed", "rendezvous was closed"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous-timeout", "timed out"),
    (
        "[2024-02-27T21:35:32.106313Z] fa88a9df || WARNING: torch.distributed.elastic.agent.server.api:Received 15 death"
        " signal, shutting down workers",
        "launcher-terminated",
        "signal 15",
    ),
    (
        "INFO:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. 100/100 attempts left; will"
        " restart worker group",
        "worker-group-restart",
        "100 of 100 restarts left",
    ),
    # a public torchelastic log (find_string)
    (
        "[INFO] 2021-05-21 23:18:16,220 api: [default] Worker group FAILED. 3/3 attempts left; will restart worker group",
        "worker-group-restart",
        "3 of 3 restarts left",
    ),
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 2019) of binary:"
        " /usr/bin/python",
        "child-failed",  # crashes.py reads torchrun's agent lines (the worker's global rank is in its table)
        "local rank 0 (pid 2019) died of SIGABRT (exit code -6)",
    ),
    (
        "I1107 01:20:28.501000 7974 torch/distributed/elastic/multiprocessing/errors/__init__.py:368] ('local_rank %s"
        " FAILED with no error file. Decorate your entrypoint fn with @record for traceback info. See:"
        " https://pytorch.org/docs/stable/elastic/errors.html', 0)",
        "child-no-error-file",
        "local rank 0 failed",
    ),
    # NCCL's setup (M37, M40; the formats of src/graph, src/net.cc, src/plugin, src/bootstrap.cc)
    # M32's last line: the driver could not set the GPU up (the message before it says why: it fell off the bus)
    ("[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).", "gpu-probe-failed", "initialise 1 GPU"),
    ("XML Import Channel : dev 3 not found.", "nccl-graph-file", "GPU 3"),
    (
        "gpu-node07:48211:48390 [2] graph/xml.cc:1257 NCCL WARN Could not open XML graph file /etc/nccl/graph.xml : No"
        " such file or directory",
        "nccl-graph-file",
        "/etc/nccl/graph.xml",
    ),
    (
        "gpu-node07:48211:48390 [2] graph/xml.cc:149 NCCL WARN XML Parse error : expecting '<', got 'x'",
        "nccl-topo-file",
        "<",
    ),
    (
        "gpu-node07:48211:48211 [0] NCCL INFO NET/Plugin: libnccl-net.so: libfabric.so.1: cannot open shared object file:"
        " No such file or directory",
        "net-plugin-failed",
        "plugin libnccl-net.so failed to load (libfabric.so.1: cannot open shared object file",
    ),
    (
        "gpu-node07:48211:48211 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libfabric.so.1: cannot open shared"
        " object file: No such file or directory.",
        "net-plugin-failed",
        "libfabric.so.1",
    ),
    (
        "gpu-node07:48211:48211 [0] NCCL INFO Failed to initialize NET plugin AWS Libfabric",
        "net-plugin-failed",
        "plugin AWS Libfabric loaded",
    ),
    (
        "gpu-node07:48211:48211 [0] net.cc:627 NCCL WARN Error: network AWS Libfabric not found.",
        "net-unavailable",
        "AWS",
    ),
    (
        "gpu-node07:48211:48390 [2] bootstrap.cc:68 NCCL WARN Message truncated : received 2048 bytes instead of 4",
        "bootstrap-truncated",
        "received a message of 2048 bytes instead of 4",
    ),
    (
        "rank_604.s12gn3064.4031852.log:[0604/1024][2025-02-16 22:31:34,422] [misc/socket.cc:586] [s12gn3064:pid=3942408]"
        " NCCL WARN socketPollConnect poll() returned 1, no POLLOUT events",
        "connect-failed",
        "poll() returned 1",
    ),
    # the c10d store before torch 2.4 (socket.cpp), as users posted it (find_string)
    (
        "[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in"
        " use).",
        "store-port-in-use",
        "port 29500 is already taken",
    ),
    (
        "[W socket.cpp:401] [c10d] The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in"
        " use).",
        "store-port-in-use",
        "port 29500",
    ),
    (
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed"
        " to bind to [::]:29500 (errno: 98 - Address already in use). The server socket has failed to bind to ?UNKNOWN?"
        " (errno: 98 - Address already in use).",
        "store-port-in-use",
        "port 29500",
    ),
    (
        "[E socket.cpp:435] [c10d] The server socket has failed to listen on any local network address.",
        "store-listen-failed",
        "could not listen",
    ),
]


@pytest.mark.parametrize(("line", "fid", "said"), FIRES)
def test_the_rule_fires_and_names_the_lines_specifics(line: str, fid: str, said: str) -> None:
    findings = found(line)
    assert fid in findings, sorted(findings)
    assert said in findings[fid].message, findings[fid].message
    assert "unrecognised-error" not in findings


# Lines near a rule's wording that must not give it (the id named), nor any error.
QUIET = [
    ("kernel: NVRM: GPU1 kbifCacheVFInfo_GB100: Unable to read NV_PF0_INITIAL_AND_TOTAL_VFS", "gpu-xid"),  # M33
    (
        "[74889.644112] NVRM: GPU at PCI:0000:02:00: GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6df",
        "gpu-fallen-off-bus",
    ),  # M31
    ("[74889.542239] nvidia 0000:02:00.0: device has no AER-aware driver", "pcie-aer-uncorrected"),  # M31
    ("    raise RendezvousClosedError()", "rendezvous-closed"),  # M22: the raise in the traceback's source line
    ("[1,0]<stderr>:[1a62e574072d:00334] Signal code: Non-existant physical address (2)", "native-crash"),  # M30
    ("[1,0]<stderr>:[1a62e574072d:00334] Failing at address: 0x7f246888f00a", "native-crash"),  # M30
    (
        "[2024-02-27T21:35:32.106517Z] fa88a9df || WARNING: torch.distributed.elastic.multiprocessing.api:Sending process"
        " 165 closing signal SIGTERM",
        "launcher-terminated",
    ),  # M24
    ("INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group", "worker-group-restart"),  # M23
    # NET/Plugin INFO lines of healthy inits (M04, nccl_logs 11 and 07): no plugin configured, none found
    (
        "ip-10-216-178-255:416482:416482 [4] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v6 symbol.",
        "net-plugin-failed",
    ),
    (
        "ip-10-216-178-255:416482:416482 [4] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin symbol (v4 or v5).",
        "net-plugin-failed",
    ),
    (
        "agzen-worker:475220:475228 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "net-plugin-failed",
    ),
    (
        "k69a05298:85517:85517 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "net-plugin-failed",
    ),
    (
        "ip-10-216-178-255:416486:416524 [7] NCCL INFO NET/OFI Running on p4d.24xlarge platform, Setting NCCL_TOPO_FILE"
        " environment variable to /opt/aws-ofi-nccl/share/aws-ofi-nccl/xml/p4d-24xl-topo.xml",
        "nccl-topo-file",
    ),  # M04
    (
        "gpu-node07:48211:48211 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl/graph.xml",
        "nccl-graph-file",
    ),
    (
        "gpu-node07:48211:48211 [0] NCCL INFO Search 0 : 16 channels loaded from XML graph",
        "nccl-graph-file",
    ),  # search.cc
    (
        "rtptest1620:935572:937467 [0] NCCL INFO RAS client listening socket at ::1<28028>",
        "native-crash",
    ),  # M38: the RAS listener is not the crash
    (
        "[W503 10:00:00.000000 socket.cpp:204] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
        "store-port-in-use",
    ),
    ("      Reason:       Completed", "k8s-oom-killed"),  # kubectl describe of a container that ended well
    ("      Exit Code:    0", "container-killed"),
    ("      Exit Code:    1", "container-killed"),
    # a container that ended well, the kernel's own OOM line (host-oom-killed reads it), words that only mention a kill
    ("trainer-1 exited with code 0", "container-killed"),
    ("trainer-1 exited with code 1370", "container-killed"),
    ("Killed process 4242 (python) total-vm:1024kB", "process-killed"),
    ("Killed 3 stale workers from the previous run", "process-killed"),
    # torch's warning at each attempt to reach the c10d store: a healthy job's start prints it (the store not up yet;
    # a real fairseq log, find_string); torch gives up with an error of its own (store-connect-failed)
    (
        "[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:18630 (errno: 99 - Cannot"
        " assign requested address).",
        "store-connect-failed",
    ),
    (
        "[W1121 10:00:00.000000000 TCPStore.cpp:343] [c10d] TCP client failed to connect/validate to host"
        " 172.17.0.9:50437 - retrying (try=0, timeout=600000ms, delay=1066ms): Connection reset by peer",
        "store-connect-failed",
    ),
]


@pytest.mark.parametrize(("line", "fid"), QUIET)
def test_a_near_miss_gives_no_error(line: str, fid: str) -> None:
    findings = found(line)
    assert fid not in findings, findings[fid].message
    assert not [f for f in findings.values() if f.severity == "error"], sorted(findings)


def test_an_xid_code_is_read_whole() -> None:
    """Xid 137 is not Xid 13 and Xid 145 is not Xid 14 (a code not in the table)."""
    assert set(found("kernel: NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error")) == {
        "gpu-xid-notice"
    }
    assert set(found("kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)")) == {"gpu-xid"}


def test_a_notice_xid_alone_passes() -> None:
    """A remapped memory row or a preemptive cleanup (Xid 63, 45) is recorded, not a failure on its own."""
    report = read(
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
    )
    assert report.root_cause is None and [f.severity for f in report.findings] == ["warning"]


def test_corrected_pcie_errors_alone_are_a_warning() -> None:
    report = read(*excerpt_lines("M31")[:4])  # the corrected Replay Timer Timeout, before the fatal error
    assert report.root_cause is None and {f.id for f in report.findings} == {"pcie-aer-corrected"}


def test_one_finding_per_crash_line() -> None:
    """UCX's segfault banner names "Segmentation fault" too: the shell's rule reads only the shell's line."""
    (crash,) = read(
        "[node3:41234:0:41299] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)"
    ).findings
    assert crash.message.count("process 41234") == 1 and "also" not in crash.message


def test_slurm_cancel_with_a_reason_is_that_reason() -> None:
    """A cancel DUE TO the time limit is the time limit; one with no reason (M27) stays a cancel."""
    limit = found(
        "slurmstepd: error: *** JOB 13324410 ON cdr798 CANCELLED AT 2021-09-07T15:44:06 DUE TO TIME LIMIT ***"
    )
    assert set(limit) == {"slurm-time-limit"}
    cancel = found("slurmstepd: error: *** STEP 6053.0 ON DEL2212S020 CANCELLED AT 2024-04-23T12:18:08 ***")
    assert set(cancel) == {"slurm-cancelled"}


def test_a_retry_of_the_new_socket_format_keeps_its_address() -> None:
    """NCCL 2.27+ names the peer: the address rule reads it, the poll() rule (2.23-2.26) does not claim it."""
    (finding,) = read(
        "node3:999:1010 [2] misc/socket.cc:600 NCCL WARN socketPollConnect to 10.0.0.2<12345> failed with error"
        " Connection timed out"
    ).findings
    assert finding.id == "connect-failed" and "10.0.0.2:12345" in finding.message and "also" not in finding.message


def _two_files(first: Path, second: Path) -> LogReport:
    lines = itertools.chain(
        frame_all(first.read_text(encoding="utf-8").splitlines(), first.name),
        frame_all(second.read_text(encoding="utf-8").splitlines(), second.name),
    )
    return analyse(lines)


def test_a_gpu_fault_is_the_cause_over_the_other_ranks_timeouts() -> None:
    """Ranks' watchdog timeouts read first (nccl_logs 41), a node's kernel log after them (M31): the GPU fault is the
    root cause, wherever its lines fall."""
    (timeouts,) = (FIXTURES / "nccl_logs").glob("41_*.log")
    (kernel,) = MORE.glob("M31_*.log")
    report = _two_files(timeouts, kernel)
    assert report.root_cause is not None and report.root_cause.id == "pcie-aer-uncorrected", report.root_cause
    assert {"collective-timeout", "gpu-fallen-off-bus"} <= {f.id for f in report.findings}


def test_an_abort_is_an_echo_of_the_illegal_access() -> None:
    """M35: Python's faulthandler reports the abort first; the illegal memory access after it is the cause."""
    report = read(*excerpt_lines("M35"))
    assert report.root_cause is not None and report.root_cause.id == "cuda-illegal-address"
    assert report.root_cause.ranks == (0,)


def test_torchs_retries_to_reach_the_store_are_a_warning_and_its_giving_up_the_error() -> None:
    """Must-fire and must-not together: the attempt's warning alone is listed as a warning (the job went on), the
    error torch prints when it gives up is the root cause, with the attempts before it."""
    attempt = (
        "[W502 09:00:01.223456789 socket.cpp:697] [c10d] The client socket has failed to connect to [node0]:29500"
        " (errno: 111 - Connection refused)."
    )
    alone = found(attempt)
    assert (
        alone["store-connect-retried"].severity == "warning" and "node0:29500" in alone["store-connect-retried"].message
    )
    assert not [f for f in alone.values() if f.severity == "error"], sorted(alone)
    gave_up = (
        "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to connect"
        " to (node0, 29500)."
    )
    report = analyse(frame_all([attempt + "\n", attempt + "\n", gave_up + "\n"], "rank1.log"))
    assert report.root_cause is not None and report.root_cause.id == "store-connect-failed", report.root_cause
    assert "node0:29500" in report.root_cause.message
