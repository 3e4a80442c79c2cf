"""Rules for a job that fails while it sets up: NCCL's topology and graph files, its network plugin, its
bootstrap connections, and the c10d store's port.

The NCCL formats were read in NVIDIA/nccl (src/graph/xml.cc, src/graph/search.cc, src/bootstrap.cc,
src/misc/socket.cc, src/net.cc and src/plugin/) at the tags named in data/messages.tsv; the store's in
torch/csrc/distributed/c10d/socket.cpp and TCPStoreLibUvBackend.cpp.
"""

from __future__ import annotations

from ncclcheck.analysis.logs.rule import Rule, make_rule
from ncclcheck.model.ids import logs as logs_ids

GRAPH_FIX = (
    "NCCL_GRAPH_FILE injects a channel layout written for one machine's GPUs (cloud images set it in /etc/nccl.conf or"
    " the environment): unset it (keep NCCL_TOPO_FILE) when the job uses fewer or other GPUs than it names, or run"
    " with every GPU it names visible (CUDA_VISIBLE_DEVICES)"
)
TOPO_FIX = (
    "fix or unset the XML file NCCL_TOPO_FILE (or NCCL_GRAPH_FILE) names (/etc/nccl.conf and the plugin may set"
    " them); without it NCCL detects the topology itself"
)
PLUGIN_FIX = (
    "the plugin NCCL_NET_PLUGIN names (or libnccl-net.so) must load and match this NCCL: check its path"
    " (LD_LIBRARY_PATH), its own libraries (`ldd` on it: libfabric, libibverbs) and the device it drives"
    " (/dev/infiniband in the container); without it NCCL falls back to IB verbs or TCP sockets (slow)"
)
PORT_FIX = (
    'another job, a second "rank 0" or a process left from an earlier run holds the port: find it with'
    " `ss -ltnp 'sport = :PORT'` (the port above); end it, or give this job another --master-port / --rdzv-endpoint port"
)
CONNECT_FIX = (
    "a firewall, conntrack or an overloaded peer dropped the connection (its SYN went unanswered): find the"
    " destination (the bootstrap lines before it), test the port with `nc`, set NCCL_SOCKET_IFNAME to the routed"
    " interface on every node; NCCL 2.27 and later retry such connects"
)
# NCCL tries the default plugin name (libnccl-net.so) when none is configured: that file missing is no failure
NOT_DEFAULT_MISSING = r"(?!(?:libnccl-net\.so: )?libnccl-net\.so: cannot open shared object file: No such file)"
RETRY = (  # 2.26's "%s: connect returned %s, retrying (%d/%ld) ...", 2.27 and later name the peer
    r"\w+: connect (?:to (?P<peer>\S+?<\d+>) )?returned (?P<why>[A-Za-z ]+?), retrying \((?P<n>\d+)/"
)
MAGIC_FIX = (
    "something that is not this job's NCCL connected to NCCL's port: a port scanner or health check, or a process of"
    " another job or of an earlier run (a reused MASTER_PORT, a stale process); NCCL drops it and waits for the real"
    " peer, but before 2.30u1 such a connection can leave a bootstrap or proxy accept stuck (NVIDIA/nccl #1808,"
    " #1871): keep scanners off the nodes' ephemeral ports while jobs run, end stale processes, and upgrade NCCL if"
    " init hangs after it"
)
VERBS_FIX = (
    "nothing if this host has no RDMA NIC (NCCL uses TCP sockets as meant); if it has one, install rdma-core"
    " (libibverbs1) or MLNX_OFED/DOCA in the image and pass /dev/infiniband into the container"
)
# One rule a few lines, its fields in make_rule's order (fmt: skip keeps the table a table).
SETUP_RULES: tuple[Rule, ...] = (
    make_rule(
        "nccl-graph-file", "error", "XML Import Channel",
        r"XML Import Channel : dev (?P<dev>\d+) not found",
        "NCCL_GRAPH_FILE's graph uses GPU {dev}, which this process cannot see: the graph was written for more or"
        " other GPUs than the job has",
        GRAPH_FIX,
    ),
    make_rule(
        "nccl-graph-file", "error", "Could not open XML graph file",
        r"Could not open XML graph file (?P<file>\S+) : (?P<why>.+)",
        "NCCL could not open the graph file NCCL_GRAPH_FILE names ({file}): {why}",
        GRAPH_FIX,
    ),
    make_rule(
        "nccl-graph-file", "error", "XML Graph has wrong version",
        r"XML Graph has wrong version (?P<have>\d+), (?P<need>\d+) needed",
        "NCCL_GRAPH_FILE's graph has version {have}, this NCCL needs {need}",
        GRAPH_FIX,
    ),
    make_rule(
        "nccl-topo-file", "error", "XML Topology has wrong version",
        r"XML Topology has wrong version (?P<have>\d+), (?P<need>\d+) needed",
        "NCCL_TOPO_FILE's topology has version {have}, this NCCL needs {need}",
        TOPO_FIX,
    ),
    make_rule(
        "nccl-topo-file", "error", "XML Parse",
        r"XML Parse(?: error)? : (?P<what>.+)",
        "NCCL could not parse an XML topology or graph file (NCCL_TOPO_FILE, NCCL_GRAPH_FILE): {what}",
        TOPO_FIX,
    ),
    make_rule(
        "nccl-topo-file", "error", "XML Mismatch",
        r"XML Mismatch : (?P<a>\S+) / (?P<b>\S+)",
        "NCCL could not parse an XML topology or graph file (NCCL_TOPO_FILE, NCCL_GRAPH_FILE): <{a}> closed by </{b}>",
        TOPO_FIX,
    ),
    make_rule(  # a WARN up to about 2.18, an INFO since: NCCL then detects the topology itself
        "nccl-topo-file-unread", "warning", "Could not open XML topology file",
        r"Could not open XML topology file (?P<file>\S+) : (?P<why>.+)",
        "NCCL could not open the topology file NCCL_TOPO_FILE names ({file}: {why}): it detected the topology itself",
        "harmless if NCCL's own detection is right (inside a VM or container often it is not: then mount the file or"
        " fix the path); unset NCCL_TOPO_FILE if the file is not meant for this machine",
    ),
    make_rule(  # INFO: the library is there but will not load (a missing dependency, a symbol); NCCL carries on without
        "net-plugin-failed", "warning", "Plugin load returned",
        rf"NET/Plugin ?: Plugin load returned (?P<errno>\d+) : {NOT_DEFAULT_MISSING}(?P<why>.+?)\.?$",
        "NCCL's network plugin failed to load ({why}): NCCL falls back to its internal transports",
        PLUGIN_FIX,
    ),
    make_rule(  # plugin_open.cc since 2.28 ("%s/Plugin: %s: %s"), net.cc 2.22-2.26 ("NET/Plugin: %s" with dlerror)
        "net-plugin-failed", "warning", "NET/Plugin: ",
        rf"NET/Plugin: {NOT_DEFAULT_MISSING}(?P<lib>[\w./-]+\.so[\w.]*): (?P<why>.+)",
        "NCCL's network plugin {lib} failed to load ({why}): NCCL falls back to its internal transports",
        PLUGIN_FIX,
    ),
    make_rule(
        "net-plugin-failed", "warning", "Failed to initialize NET plugin",
        r"Failed to initialize NET plugin (?P<lib>.+)",
        "NCCL's network plugin {lib} loaded but failed to initialise: NCCL falls back to its internal transports",
        PLUGIN_FIX,
    ),
    make_rule(
        "net-unavailable", "error", "Failed to initialize any NET plugin",
        r"Failed to initialize any NET plugin",
        "NCCL found no network transport it could initialise (neither a plugin nor IB nor sockets)",
        "read the NET/ lines before it: NCCL_NET / NCCL_NET_PLUGIN may name one that is not there; unset them or fix"
        " the plugin; NCCL_IB_DISABLE=1 leaves sockets",
    ),
    make_rule(
        "net-unavailable", "error", "Error: network ",
        r"Error: network (?P<net>.*?) not found",
        "NCCL_NET asks for network '{net}', which this NCCL did not load",
        "unset NCCL_NET or name one NCCL lists at init (`Using network ...`: IB, Socket, or the plugin's name, which"
        " loads only if NCCL_NET_PLUGIN / libnccl-net.so does)",
    ),
    make_rule(  # bootstrap.cc: a bootstrap message of another size than the receiver expects
        "bootstrap-truncated", "error", "Message truncated",
        r"Message truncated : received (?P<got>[\d,]+) bytes instead of (?P<want>[\d,]+)",
        "NCCL's bootstrap received a message of {got} bytes instead of {want}: the ranks run different NCCL versions,"
        " or something else connected to NCCL's bootstrap port",
        "compare `NCCL version` on every rank (one libnccl for all: the same torch wheel or NCCL on every node, no"
        " stray LD_LIBRARY_PATH); make sure no other job, port scanner or health check connects to the ports in"
        " NCCL's bootstrap range",
    ),
    make_rule(  # the last of NCCL_SOCKET_RETRY_CNT's retries (2.26 and later): one more refusal and NCCL gives up
        "connect-failed", "error", ", retrying (",
        rf"{RETRY}(?P=n)\)",
        "a connection to a peer (peer {peer}) failed at NCCL's last retry ({n}/{n}): {why}",
        CONNECT_FIX,
    ),
    make_rule(  # the same retries before the last: NCCL is still trying (a peer not listening yet, a lost SYN)
        "connect-retried", "info", ", retrying (",
        rf"{RETRY}(?!(?P=n)\))(?P<max>\d+)\)",
        "NCCL retried a connection to a peer (peer {peer}): {why}, retry {n} of {max}",
        "nothing if the job went on: a peer not listening yet or a dropped SYN; if it reaches its last retry, the"
        " connection failed (a firewall, the wrong interface: NCCL_SOCKET_IFNAME, or the peer died)",
    ),
    make_rule(  # socket.cc 2.12-2.25: the refused (20000, 20 s) or timed-out (3) retries ran out
        "connect-failed", "error", ": exceeded ",
        r"\w+: exceeded (?P<what>retries|timeouts) \((?P<n>\d+)\)",
        "a connection to a peer kept failing and NCCL gave up after {n} {what}",
        CONNECT_FIX,
    ),
    make_rule(  # socket.cc 2.17-2.25 (WARN); 2.26 and later say it at INFO, naming who connected
        "socket-wrong-magic", "warning", "socketFinalizeAccept: ",
        r"socketFinalizeAccept: (?:wrong magic (?P<got>[0-9a-fx]+) != (?P<want>[0-9a-fx]+)"
        r"|didn't receive a valid magic from (?P<peer>\S+))",
        "a connection to NCCL's listening port did not come from this job's NCCL (peer {peer}): NCCL dropped it",
        MAGIC_FIX,
    ),
    make_rule(  # net_socket.cc / net_ib.cc: WARN("Could not find real path of %s", devicePath) and it goes on (a GPU's
        # own bus path, /sys/class/pci_bus/..., fails the init instead: that one stays unexplained, an error)
        "nic-not-pci", "info", "Could not find real path of",
        r"Could not find real path of (?:\S+ \()?(?P<path>/sys/class/(?:net|infiniband)/(?P<dev>[^/\s]+)/device)",
        "NCCL found no PCI device behind NIC {dev} ({path}): a virtual or container NIC, placed far from the GPUs",
        "nothing to fix on a VM or in a container whose NIC is virtual; if that NIC is meant to be the job's RDMA NIC, its"
        " driver or the container's /sys is wrong: `ncclcheck env` shows the NICs",
    ),
    make_rule(  # ibvwrap.cc: WARN("Call to ibv_reg_mr failed with error %s", strerror(errno)) (_iova2, _dmabuf too)
        "ib-reg-mr-failed", "error", "Call to ibv_reg_mr",
        r"Call to ibv_reg_mr\w* failed(?: with error (?P<why>.+?))?\s*$",
        "NCCL could not register memory with the IB NIC ({why})",
        "'Cannot allocate memory': the locked-memory limit is too low (ulimit -l unlimited; docker --ulimit memlock=-1;"
        " SLURM: PropagateResourceLimits or the slurmd unit's LimitMEMLOCK), `ncclcheck env` checks it; 'Bad address'"
        " on GPU memory: GPUDirect RDMA is not set up (nvidia-peermem loaded, or NCCL_NET_GDR_LEVEL=0 to go without)",
    ),
    make_rule(  # net_socket.cc: "NET/Socket : peer %s message truncated : receiving %d bytes instead of %d. If you
        # believe your socket network is in healthy state, there may be a mismatch in collective sizes or environment
        # settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks"
        logs_ids.SOCKET_MESSAGE_TRUNCATED, "error", "message truncated",
        r"NET/Socket : peer (?P<peer>\S+) message truncated : receiving (?P<got>\d+) bytes instead of (?P<want>\d+)",
        "NCCL's socket transport got {got} bytes from {peer} where it expected {want}: the ranks disagree on a"
        " collective's size or on NCCL's protocol",
        "a mismatch between ranks, not the network: compare every rank's collective shapes (TORCH_DISTRIBUTED_DEBUG"
        "=DETAIL names them) and make NCCL_PROTO, NCCL_ALGO and the other NCCL_* settings the same on every node",
    ),
    make_rule(  # ProcessGroupGloo: "Gloo connectFullMesh failed with %s" (gloo's pair.cc error in brackets)
        logs_ids.GLOO_CONNECT_FAILED, "error", "connectFullMesh failed",
        r"Gloo connectFullMesh failed with (?P<why>.+)",
        "gloo could not connect every rank to every other at init: {why}",
        "an address gloo picked for a rank is not reachable from the others: set GLOO_SOCKET_IFNAME to the interface"
        " the nodes share, and check that each host's name does not resolve to 127.0.1.1 (/etc/hosts); `ncclcheck"
        " env` shows the interfaces",
    ),
    make_rule(  # ibvwrap.cc / ibvsymbols.cc: a WARN in 2.4-2.10, an INFO since; "Count not open %s" (sic) in 2.28+
        "ib-verbs-missing", "info", "libibverbs",
        r"Failed to open libibverbs\.so\[\.1\]|Count not open (?P<lib>\S*libibverbs\S*)",
        "libibverbs could not be loaded here: NCCL cannot use InfiniBand/RoCE on this host and uses TCP sockets",
        VERBS_FIX,
    ),
    make_rule(  # socket.cc 2.23-2.26: WARN("socketPollConnect poll() returned %d%s", ret, ", no POLLOUT events")
        "connect-failed", "error", "socketPollConnect poll() returned",
        r"socketPollConnect poll\(\) returned (?P<ret>-?\d+)(?P<no>, no POLLOUT events)?",
        "a bootstrap TCP connect never completed: poll() returned {ret} with no POLLOUT event (the peer never"
        " answered or reset the connection)",
        CONNECT_FIX,
    ),
    # torch <= 2.3 (socket.cpp): "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno:
    # 98 - Address already in use)." per address, then the error repeats them after "...on any local network address."
    make_rule(
        "store-port-in-use", "error", "(errno: 98 - Address already in use)",
        r"The server socket has failed to (?:bind to|listen on) (?:\[[^\]\s]*\]:(?P<port>\d+)|[\d.]+:(?P<port2>\d+)"
        r"|\S+) \(errno: 98 - Address already in use\)",
        "the store/rendezvous port {port} is already taken on this node: the c10d store could not listen",
        PORT_FIX,
    ),
    make_rule(  # torch <= 1.8: TCPStore's bare "Address already in use"
        "store-port-in-use", "error", "RuntimeError: Address already in use",
        r"RuntimeError: Address already in use$",
        "a port is already taken on this node: the c10d store (MASTER_PORT) could not listen",
        PORT_FIX,
    ),
    make_rule(  # the error line alone: its reason (errno) is on the warning lines before it, or not printed
        "store-listen-failed", "error", "The server socket has failed to listen",
        r"The server socket has failed to listen on any local network address\.\s*$",
        "the c10d store could not listen on any local address (the reason is on the lines before it)",
        "errno 98 on the lines before = the port is taken (`ss -ltnp 'sport = :PORT'`); 99 = MASTER_ADDR is not an"
        " address of this node; 13 = a port below 1024",
        True,
    ),
)  # fmt: skip
