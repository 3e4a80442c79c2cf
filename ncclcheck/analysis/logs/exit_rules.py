"""Rules for how a process or a job ended: native crash banners, the scheduler's and the container runtime's ends,
and torchrun's elastic agent (its rendezvous, its restarts, the workers it saw fail).

A crash banner names the process that died first and how (a signal); a rank's death makes every other rank's
timeout an echo. An abort (SIGABRT) is almost always deliberate, the end of an error printed before it (torch's
watchdog, an assert, std::terminate), so it is an echo too.
"""

from __future__ import annotations

from ncclcheck.analysis.logs.rule import Rule, make_rule
from ncclcheck.model.ids import logs as logs_ids

SIGNAL_FIX = (
    "find this process's rank (its host and pid are in the line) and read the native backtrace after the banner: its"
    " top frames name the library that crashed (NCCL, a dataset reader, an extension); SIGSEGV: rerun with"
    " NCCL_DEBUG=INFO and TORCH_SHOW_CPP_STACKTRACES=1 and upgrade or report the library; SIGBUS: /dev/shm too small"
    " (--shm-size, --ipc=host) or a memory-mapped file truncated; the other ranks' errors are echoes of this death"
)
BUS_FIX = (
    "`df -h /dev/shm` on the node: give the container a bigger /dev/shm (docker --shm-size=8g or --ipc=host; a Memory"
    " emptyDir in Kubernetes), since NCCL's shared-memory buffers and DataLoader workers live there; if the backtrace"
    " is in a dataset reader (lmdb, a numpy memmap), the mapped file was truncated or modified while in use;"
    " NCCL_SHM_DISABLE=1 as a test"
)
ABORT_FIX = (
    "a consequence: the error printed before the abort (a watchdog timeout, an NCCL error, an assert) is the cause"
)
BUS = (
    "a bus error (SIGBUS): it read memory-mapped memory that no longer exists, usually /dev/shm full or a truncated"
    " mapped file"
)
# UCX's fatal-error prefix (src/ucs/debug/debug.c, ucs_log_fatal_error): "[host:pid:thread:tid] "
UCX = r"\[(?P<host>[^\s:\]]+):(?P<pid>\d+)\s*:\d+:\d+\] Caught signal "
# Open MPI's handler (opal/util/stacktrace.c): "[host:pid] *** Process received signal ***", "[host:pid] Signal: %s (%d)"
OMPI = r"\[(?P<host>[^\s:\]]+):(?P<pid>\d+)\] "
HOST_OOM_FIX = (
    "host RAM ran out (dataloader workers and their prefetch, pinned memory, a leak, several ranks' copies of the"
    " data): lower num_workers/prefetch_factor, share the dataset, or request more memory; the peers' 'connection"
    " closed' errors are echoes"
)
K8S_MEMORY_FIX = (
    "raise the container's resources.limits.memory or use less host memory (fewer DataLoader workers, smaller"
    " prefetch); a Memory emptyDir for /dev/shm counts against the same limit"
)
KILLED_FIX = (
    "SIGKILL is no crash: `dmesg` on that node names the OOM killer's victims (host memory ran out: fewer DataLoader"
    " workers, a smaller prefetch or batch); with none there, something outside killed it (kill -9, scancel, a time"
    " limit, the orchestrator); the other ranks' connection errors are echoes of it"
)
RESTART_FIX = (
    "a consequence: the worker's own first error (its traceback, a signal) is the cause; restarts only repeat it"
    " unless it was transient"
)


def _shell(signal: str, fid: str, message: str, fix: str, secondary: bool = False) -> Rule:
    """bash's report: the bare line, or "bash: line N: PID <signal> [(core dumped)] <command>"."""
    regex = rf"^\s*(?:\S+: line \d+: +(?P<pid>\d+) +(?P<signal>{signal})\b.*|(?P<signal2>{signal})(?: +\(core dumped\))?\s*)$"
    return make_rule(fid, "error", signal, regex, message, fix, secondary)


# One rule a few lines, its fields in make_rule's order (fmt: skip keeps the table a table).
CRASH_RULES: tuple[Rule, ...] = (
    make_rule(
        "native-crash", "error", "] Caught signal ",
        UCX + r"7 \((?P<signal>Bus error)(?::\s*(?P<why>[^)]*))?\)",
        "process {pid} on {host} crashed with " + BUS,
        BUS_FIX,
    ),
    make_rule(
        "native-crash", "error", "] Caught signal ",
        UCX + r"(?P<num>(?!6\b|7\b)\d+) \((?P<signal>[^:)]+)(?::\s*(?P<why>[^)]*))?\)",
        "process {pid} on {host} crashed: signal {num} ({signal}), caught by UCX's handler",
        SIGNAL_FIX,
    ),
    make_rule(
        "process-aborted", "error", "] Caught signal ",
        UCX + r"6 \((?P<signal>[^:)]+)",
        "process {pid} on {host} aborted (SIGABRT, caught by UCX's handler)",
        ABORT_FIX, True,
    ),
    make_rule(
        "native-crash", "error", "*** Process received signal ***",
        OMPI + r"\*\*\* Process received signal \*\*\*",
        "process {pid} on {host} received a fatal signal (Open MPI's handler; the signal is on its next line)",
        SIGNAL_FIX,
    ),
    make_rule(
        "native-crash", "error", "] Signal: ",
        OMPI + r"Signal: (?P<signal>Bus error) \(7\)",
        "process {pid} on {host} crashed with " + BUS,
        BUS_FIX,
    ),
    make_rule(
        "native-crash", "error", "] Signal: ",
        OMPI + r"Signal: (?P<signal>(?!Aborted)[A-Za-z ]+?) \((?P<num>(?!7\))\d+)\)",
        "process {pid} on {host} crashed: {signal} (signal {num}), caught by Open MPI's handler",
        SIGNAL_FIX,
    ),
    make_rule(
        "process-aborted", "error", "] Signal: ",
        OMPI + r"Signal: (?P<signal>Aborted) \(6\)",
        "process {pid} on {host} aborted (SIGABRT, caught by Open MPI's handler)",
        ABORT_FIX, True,
    ),
    make_rule(  # UCX's backtrace header (src/ucs/debug/debug.c): "==== backtrace (tid:%7d) ===="
        "native-backtrace", "info", "==== backtrace (tid:",
        r"==== backtrace \(tid:\s*(?P<tid>\d+)\) ====",
        "UCX printed the native backtrace of thread {tid}: the frames after it show where the process crashed",
        "its top frames (below the signal handler's) name the library that crashed; the crash banner before it names"
        " the signal",
    ),
    # Python's faulthandler (Modules/faulthandler.c): "Fatal Python error: %s" with the handled signal's name
    make_rule(
        "native-crash", "error", "Fatal Python error: ",
        r"Fatal Python error: (?P<signal>Bus error)",
        "a Python process crashed with " + BUS + " (Python's faulthandler)",
        BUS_FIX,
    ),
    make_rule(
        "native-crash", "error", "Fatal Python error: ",
        r"Fatal Python error: (?P<signal>Segmentation fault|Illegal instruction|Floating point exception)",
        "a Python process crashed in native code: {signal} (Python's faulthandler)",
        SIGNAL_FIX,
    ),
    make_rule(
        "process-aborted", "error", "Fatal Python error: ",
        r"Fatal Python error: (?P<signal>Aborted)",
        "a Python process aborted (SIGABRT; Python's faulthandler)",
        ABORT_FIX, True,
    ),
    _shell("Bus error", "native-crash", "a process crashed with " + BUS + " (the shell's report)", BUS_FIX),
    _shell(
        "Segmentation fault", "native-crash", "a process crashed in native code: {signal} (the shell's report)",
        SIGNAL_FIX,
    ),
    _shell("Aborted", "process-aborted", "a process aborted (SIGABRT; the shell's report)", ABORT_FIX, True),
    _shell(  # bash's job status line for SIGKILL (strsignal: "Killed"): no crash, something killed it
        "Killed", logs_ids.PROCESS_KILLED, "a process was killed (SIGKILL; the shell's report)", KILLED_FIX,
    ),
    make_rule(  # docker compose's "<service> exited with code <n>" (128 + 9: SIGKILL; 139, 135: a crash signal)
        "container-killed", "error", "exited with code 13",
        r"^\s*(?P<service>[\w.-]+) exited with code (?P<code>137)\s*$",
        "the container {service} ended with exit code {code} (128 + 9, SIGKILL): the OOM killer, or docker killing it",
        "`docker inspect` on it (State.OOMKilled) and the host's `dmesg` (OOM killer) say which: raise its memory"
        " limit or use less host memory; else something outside stopped it (docker kill, a stop timeout)",
    ),
    make_rule(
        "container-killed", "error", "exited with code 13",
        r"^\s*(?P<service>[\w.-]+) exited with code (?P<code>139|135)\s*$",
        "the container {service} ended with exit code {code} (128 + a crash signal: 139 SIGSEGV, 135 SIGBUS)",
        "a crash in native code (139) or a bus error (135: /dev/shm too small, a truncated mapped file): the"
        " container's own log has the banner and the backtrace",
    ),
)  # fmt: skip
# slurmstepd (src/slurmd/slurmstepd/req.c): "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***", "... DUE TO
# PREEMPTION ***", "... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"; before "ON %s" was added, none
SLURM_END = r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) (?:ON (?P<host>\S+) )?CANCELLED (?:AT (?P<time>\S+) )?DUE TO "
END_RULES: tuple[Rule, ...] = (
    make_rule(
        "slurm-time-limit", "error", "DUE TO TIME LIMIT",
        SLURM_END + "TIME LIMIT",
        "SLURM ended {what} {id} on {host}: it reached its time limit (at {time})",
        "raise the job's --time or checkpoint and resume; if the ranks had stopped making progress before it (a"
        " collective timeout, no new lines), that hang is the cause and the time limit only ended it",
    ),
    make_rule(
        "slurm-node-failure", "error", "DUE TO NODE FAILURE",
        SLURM_END + "NODE FAILURE",
        "SLURM ended {what} {id} on {host}: a node of the job failed (at {time})",
        "`scontrol show node NODE` and `sinfo -R` give the reason the controller recorded; resubmit with"
        " --exclude=NODE and report the node to the admins; the other ranks' errors are echoes",
    ),
    make_rule(
        "slurm-preempted", "error", "DUE TO PREEMPTION",
        SLURM_END + "PREEMPTION",
        "SLURM preempted {what} {id} on {host}: a higher-priority job took its nodes (at {time})",
        "resubmit with --requeue and resume from a checkpoint, or use a partition/QOS without preemption",
    ),
    make_rule(  # Ray's memory monitor (src/ray/raylet/node_manager.cc): "%d Workers (tasks / actors) killed due to memory
        # pressure (OOM), %d Workers crashed due to other reasons at node (ID: %s, IP: %s) over the last time period."
        "host-oom-killed", "error", "killed due to memory pressure",
        r"(?P<n>[1-9]\d*) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)(?:.*?IP: (?P<ip>[\d.]+))?",
        "Ray's memory monitor killed {n} worker(s) on node {ip} for host memory (OOM), not GPU memory",
        HOST_OOM_FIX,
    ),
    make_rule(  # mm/oom_kill.c: "%s: Killed process %d (%s) total-vm:..." ("Out of memory", "Memory cgroup out of
        # memory"); before 4.x "Out of memory: Kill process %d (%s) score %u or sacrifice child"
        "host-oom-killed", "error", "of memory: Kill",
        r"(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): Kill(?:ed)? process"
        r" (?P<pid>\d+) \((?P<comm>[^)]*)\)",
        "the kernel's OOM killer killed process {pid} ({comm}): host memory ran out, not GPU memory",
        HOST_OOM_FIX,
    ),
    # kubectl describe pod (staging/src/k8s.io/kubectl/pkg/describe/describe.go): "Reason:\t%s", "Exit Code:\t%d"
    # under "Last State: Terminated"; the pod's status JSON: "reason": "OOMKilled"
    make_rule(
        "k8s-oom-killed", "error", "OOMKilled",
        r"\bOOMKilled\b",
        "Kubernetes killed the container for exceeding its memory limit (OOMKilled): host memory, not GPU memory",
        K8S_MEMORY_FIX,
    ),
    make_rule(
        "k8s-evicted", "error", "Evicted",
        r"Reason:\s+Evicted\b|\"reason\":\s*\"Evicted\"",
        "Kubernetes evicted the pod: its node ran short of a resource (memory, ephemeral storage)",
        "the eviction message names the resource: set requests equal to limits (Guaranteed QoS), mind ephemeral"
        " storage (logs, checkpoints, /dev/shm), or run on a node with more room",
    ),
    make_rule(  # pkg/kubelet/eviction/helpers.go: nodeLowMessageFmt = "The node was low on resource: %v. "
        "k8s-evicted", "error", "The node was low on resource",
        r"The node was low on resource: (?P<res>[\w.-]+)",
        "Kubernetes evicted the pod: its node was low on {res}",
        "set requests equal to limits (Guaranteed QoS), use less of the resource named, or run on a node with more",
    ),
    make_rule(
        "container-killed", "error", "Exit Code:",
        r"Exit Code:\s+(?P<code>137)\b",
        "the container ended with exit code {code} (128 + 9, SIGKILL): the OOM killer, or the kubelet or runtime"
        " killing it",
        "the pod's Reason (OOMKilled, Evicted) and the node's `dmesg` (OOM killer) say which; with none, something"
        " outside killed it (a liveness probe, preemption, a user)",
    ),
    make_rule(
        "container-killed", "error", "Exit Code:",
        r"Exit Code:\s+(?P<code>139|135)\b",
        "the container ended with exit code {code} (128 + a crash signal: 139 SIGSEGV, 135 SIGBUS)",
        "a crash in native code (139) or a bus error (135: /dev/shm too small, a truncated mapped file): the"
        " container's own log has the banner and the backtrace",
    ),
)  # fmt: skip
# torch/distributed/elastic (agent/server/api.py, multiprocessing/api.py, multiprocessing/errors/__init__.py,
# rendezvous/api.py): the lines torchrun's agent prints about its workers and its rendezvous
ELASTIC_RULES: tuple[Rule, ...] = (
    make_rule(  # "raise RendezvousClosedError" (dynamic_rendezvous.py, etcd_rendezvous.py) prints the bare class
        "rendezvous-closed", "error", "RendezvousClosedError",
        r"(?<![\w])(?<!raise )RendezvousClosedError(?::\s(?P<what>.+)|\s*$)",
        "the elastic rendezvous was closed: another agent finished or gave up (its restarts ran out), so this agent"
        " cannot join",
        "a consequence: the agent that closed it failed first (read its log); restart the whole job with a fresh"
        " --rdzv-id; to scale down in elastic mode, --nnodes MIN:MAX must allow the smaller size",
        True,
    ),
    make_rule(
        "rendezvous-timeout", "error", "RendezvousTimeoutError",
        r"(?<![\w])(?<!raise )RendezvousTimeoutError(?::\s(?P<what>.+)|\s*$)",
        "the elastic rendezvous timed out: not enough agents joined in time",
        "the nodes that never joined are the cause: check that they started, reach --rdzv-endpoint (`ncclcheck env"
        " --master-addr HOST --master-port PORT`) and share the --rdzv-id; raise --rdzv-conf join_timeout for slow"
        " starts, or let the job start with fewer (--nnodes MIN:MAX)",
    ),
    make_rule(
        "launcher-terminated", "error", "death signal",
        r"Received (?P<sig>\d+) death signal",
        "torchrun's agent received signal {sig} from outside and shut its workers down (scancel, a time limit, the"
        " orchestrator or a user): this ended the job, it is not why it failed",
        "look for the first failure before this line (a worker that had already exited, a hang); under SLURM"
        " `sacct -j JOB` says TIMEOUT or CANCELLED",
    ),
    make_rule(  # the line after which the agent's exit barrier waits: every local worker exited 0
        logs_ids.WORKER_GROUP_FINISHED, "info", "orker group ",
        r"\[(?P<role>[^\]]+)\] worker group successfully finished|Local worker group finished \(WorkerState\.SUCCEEDED\)",
        "torchrun's agent: its worker group finished (every local worker exited 0)",
        "nothing to fix: the workers this agent ran all finished",
    ),
    make_rule(
        logs_ids.WORKER_GROUP_RESTART, "error", "attempts left",
        r"Worker group (?P<state>FAILED|UNHEALTHY)\. (?P<left>\d+)/(?P<max>\d+) attempts left",
        "torchrun's worker group {state}: it restarts the workers, {left} of {max} restarts left",
        RESTART_FIX, True,
    ),
    make_rule(  # logger.info((msg, rank)) prints the tuple unformatted: "('local_rank %s FAILED with no ...', 0)"
        "child-no-error-file", "error", "FAILED with no error file",
        r"local_rank (?:(?P<rank>\d+)|%s) FAILED with no error file(?:.*?', (?P<rank2>\d+)\))?",
        "local rank {rank} failed without an error file (its entrypoint has no @record), so torchrun's summary"
        " cannot show its error",
        "a consequence: that worker's own error is in its output above (its traceback or crash banner); decorate"
        " the entrypoint with torch.distributed.elastic.multiprocessing.errors.record to get it in the summary",
        True,
    ),
)  # fmt: skip
# What the interpreter and the launcher say when a rank cannot start at all: no traceback follows, so torchrun's
# table (exit code 1 or 2) is all else there is. The program name is sys.executable, a path ending in python.
PYTHON = r"^(?P<prog>\S*python[\w.]*)"
LAUNCH_RULES: tuple[Rule, ...] = (
    make_rule(  # Modules/main.c (pymain_run_file): "%ls: can't open file %R: [Errno %d] %s\n"
        "script-not-found", "error", "can't open file",
        PYTHON + r": can't open file '(?P<path>[^']+)': \[Errno 2\] No such file or directory\s*$",
        "the rank never started: python could not find the script {path} (a misspelt name, or a path relative to"
        " another directory or node)",
        "fix the script's path in the launch command: a relative path is read from the directory the launcher starts"
        " in, on every node (`ls` it there)",
    ),
    make_rule(
        "script-not-readable", "error", "can't open file",
        PYTHON + r": can't open file '(?P<path>[^']+)': \[Errno 13\] Permission denied\s*$",
        "the rank never started: python may not read the script {path} (permission denied)",
        "give the job's user read access (`chmod a+r` on the script, execute on its directories) or run it as the"
        " file's owner",
    ),
    make_rule(  # Lib/runpy.py (_get_module_details): "No module named %s", printed as "%s: %s" % (sys.executable, msg)
        "module-not-found", "error", "No module named",
        PYTHON + r": No module named (?P<module>[\w.]+)\s*$",
        "the rank never started: python -m found no module {module}",
        "check the module's name in the launch command (`-m pkg.train`, no .py) and that its package is importable"
        " from the directory the launcher starts in (PYTHONPATH, `pip install -e .`) on every node",
    ),
    make_rule(  # Lib/runpy.py: "Error while finding module specification for %r (%s: %s)"
        "module-not-found", "error", "Error while finding module specification",
        PYTHON + r": Error while finding module specification for '(?P<module>[^']+)' \((?P<why>.*)\)\s*$",
        "the rank never started: python -m could not find the module {module} ({why})",
        "check the module's name in the launch command (`-m pkg.train`, no .py) and that its package is importable"
        " from the directory the launcher starts in (PYTHONPATH, `pip install -e .`) on every node",
    ),
    make_rule(  # argparse (Lib/argparse.py, ArgumentParser.error): "%(prog)s: error: %(message)s\n"; torchrun's prog is
        # "torchrun", or "run.py" under `python -m torch.distributed.run`
        "launcher-usage", "error", ": error: ",
        r"^(?P<prog>torchrun|run\.py): error: (?P<why>.+)",
        "torchrun refused its command line and started no rank: {why}",
        "fix the launch command (`torchrun --help` lists its options; the script and its own arguments come after"
        " torchrun's options)",
    ),
    make_rule(  # the same argparse format from the job's own script (its prog is the script's file name)
        "script-usage", "error", ": error: ",
        r"^(?P<prog>(?!run\.py:)[\w.-]+\.py): error: (?P<why>.+)",
        "the script {prog} refused its arguments and exited: {why}",
        "fix the script's arguments after its name in the launch command (`python {prog} --help` lists them)",
    ),
)  # fmt: skip
# Launchers other than torchrun report their ranks' ends themselves: Open MPI's mpirun (orte's help-errmgr-base.txt:
# "%s noticed that process rank %s with PID %s on node %s exited on signal %d (%s)."; its non-zero-status block names
# the first such process as "Process name: [[%s,%s],%s]", job id, step, rank) and DeepSpeed's launcher
# (deepspeed/launcher/launch.py, sigkill_handler: "<cmd> exits with return code = <n>"; the command it prints is the
# last process's, whichever failed: no rank is read from it).
LAUNCHER_END_FIX = (
    "a consequence: that rank's own output (its traceback, a crash banner, an NCCL error above) says why it ended;"
    " the other ranks' errors after it are echoes"
)
# Lightning's launcher (lightning/fabric/strategies/launchers/subprocess_script.py, _ChildProcessObserver): a child
# that ended non-zero is reported under its local rank, then every process is SIGKILLed, its own main process too (the
# shell's "Killed" that follows is Lightning's doing)
LIGHTNING_KILLS_ALL = "Forcefully terminating all other processes"
LIGHTNING_END = (
    r"\[rank: (?P<local>\d+)\] Child process with PID (?P<pid>\d+) terminated with code (?P<code>{code})\. "
    + LIGHTNING_KILLS_ALL
)
MPI_RULES: tuple[Rule, ...] = (
    make_rule(
        logs_ids.PROCESS_KILLED, "error", LIGHTNING_KILLS_ALL,
        LIGHTNING_END.format(code="-9"),
        "Lightning: local rank {local}'s process (pid {pid}) was killed by SIGKILL (code -9); Lightning then killed"
        " the others and its own",
        KILLED_FIX,
    ),
    make_rule(
        logs_ids.LAUNCHER_RANK_ENDED, "error", LIGHTNING_KILLS_ALL,
        LIGHTNING_END.format(code="(?!-9\\b)-?\\d+"),
        "Lightning: local rank {local}'s process (pid {pid}) ended with code {code}; Lightning then killed the others"
        " and its own (SIGKILL: the shell's \"Killed\" after it)",
        LAUNCHER_END_FIX,
    ),
    make_rule(  # a crash signal or SIGKILL: the rank died of it, the others' errors follow
        logs_ids.MPI_RANK_KILLED, "error", "noticed that process rank",
        r"(?P<by>mpirun|mpiexec|orterun|prterun) noticed that process rank (?P<who>\d+) with PID (?P<pid>\d+) on node"
        r" (?P<host>\S+) exited on signal (?P<sig>9|11|7|4|8)\b(?: \((?P<name>[^)]*)\))?",
        "Open MPI ({by}): rank {who} (pid {pid} on {host}) was killed by signal {sig} ({name})",
        KILLED_FIX + "; SIGSEGV (11), SIGBUS (7): a crash in native code, its banner in the rank's output",
    ),
    make_rule(  # another signal (SIGABRT: an abort whose reason came first; SIGTERM: ended from outside)
        logs_ids.LAUNCHER_RANK_ENDED, "error", "noticed that process rank",
        r"(?P<by>mpirun|mpiexec|orterun|prterun) noticed that process rank (?P<who>\d+) with PID (?P<pid>\d+) on node"
        r" (?P<host>\S+) exited on signal (?P<sig>(?!(?:9|11|7|4|8)\b)\d+)(?: \((?P<name>[^)]*)\))?",
        "Open MPI ({by}): rank {who} (pid {pid} on {host}) ended by signal {sig} ({name})",
        LAUNCHER_END_FIX,
    ),
    make_rule(  # the same block's head ("... but 1 process returned\na non-zero exit code."): no rank in it
        logs_ids.LAUNCHER_RANK_ENDED, "error", "terminated normally, but",
        r"Primary job +terminated normally, but (?P<n>\d+) process(?:es)? returned",
        "Open MPI: {n} process(es) returned a non-zero exit code and mpirun aborted the job",
        LAUNCHER_END_FIX,
    ),
    make_rule(
        logs_ids.LAUNCHER_RANK_ENDED, "error", "Process name: [[",
        r"^\s*Process name: \[\[\d+,\d+\],(?P<who>\d+)\]\s*$",
        "Open MPI: rank {who} ended with an error (the first process its report names: a non-zero exit status)",
        LAUNCHER_END_FIX,
    ),
    make_rule(
        logs_ids.PROCESS_KILLED, "error", "exits with return code = -9",
        r"\] exits with return code = -9\b",
        "DeepSpeed's launcher: a worker was killed by SIGKILL (return code -9)",
        KILLED_FIX,
    ),
    make_rule(
        logs_ids.LAUNCHER_RANK_ENDED, "error", "exits with return code = ",
        r"\] exits with return code = (?P<code>(?!-9\b)-?[1-9]\d*)",
        "DeepSpeed's launcher: a worker exited with return code {code} (negative: killed by that signal)",
        LAUNCHER_END_FIX,
    ),
)  # fmt: skip
EXIT_RULES: tuple[Rule, ...] = CRASH_RULES + END_RULES + ELASTIC_RULES + LAUNCH_RULES + MPI_RULES
