"""NCCL's long tail (issue 35): every IB completion status and async event, network names with a space, HCA lists
with suffixes, a missing libibverbs or default plugin, socket retries, stray connections, srun's abort notice and the
proxy's teardown line. Each class fires on its line and stays quiet (or information) where the job is healthy.

Lines are NCCL's format strings filled in (the comment names the file and release; messages.tsv holds the rows), or
real lines from tests/fixtures and public logs (named where used).
"""

from __future__ import annotations

import pytest

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.logs.ib_verbs import ASYNC_EVENTS, BENIGN, FAULT, NOTICE, WC_FINDINGS, WC_STATUSES
from ncclcheck.model.log_report import LogReport

HEAD = "gpu1:5021:5386 [0] "
INIT = HEAD + "NCCL INFO comm 0x55d0c0a1b2c0 rank 0 nranks 2 cudaDev 0 busId 18000 commId 0x1 - Init COMPLETE"


def read(*lines: str) -> LogReport:
    return analyse(frame_all(lines, "x.log"))


def ids(report: LogReport) -> set[str]:
    return {f.id for f in report.findings}


# --- ibv_wc_status: every status by number (2.20-2.28.3's format) and by name (2.28.7 and later)
NUMBERED = (
    HEAD + "transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion from peer 10.10.1.12<52317> with status={n}"
)
NUMBERED += " opcode=128 len=0 vendor err 129 (Recv) localGid ::ffff:10.10.1.11 remoteGids::ffff:10.10.1.12"
NAMED = HEAD + "transport/net_ib/common.cc:120 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<5000> with"
NAMED += " status={name}({n}) opcode=IBV_WC_SEND(0) vendor_err=136  localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2"
NAMED += " hca mlx5_0"


@pytest.mark.parametrize("status", WC_STATUSES, ids=[s.name for s in WC_STATUSES])
@pytest.mark.parametrize("form", [NUMBERED, NAMED], ids=["number", "name"])
def test_every_completion_status_is_its_own_failure(status: object, form: str) -> None:
    """Must fire: each status gives one finding that names it, its meaning and the peer; the job fails."""
    assert hasattr(status, "number") and hasattr(status, "name") and hasattr(status, "meaning")
    report = read(form.format(n=status.number, name=status.name))
    (finding,) = report.findings
    assert finding.id == WC_FINDINGS.get(status.number, "ib-completion-error")
    assert f"{status.name} ({status.number})" in finding.message and status.meaning in finding.message
    assert "peer 10." in finding.message and report.status == "fail"


def test_rnr_retry_is_not_the_transport_retry() -> None:
    """Must not: status 13 (receiver not ready) is not 12, 1 is not 12 or 13: the number is read whole."""
    rnr = read(NUMBERED.format(n=13))
    assert ids(rnr) == {"ib-completion-error"} and "receiver-not-ready" in rnr.findings[0].message
    one = read(NUMBERED.format(n=1))
    assert ids(one) == {"ib-completion-error"} and "IBV_WC_LOC_LEN_ERR" in one.findings[0].message


def test_a_status_libibverbs_does_not_define_is_still_a_failure() -> None:
    report = read(NAMED.format(name="UNKNOWN_STATUS", n=99))
    assert ids(report) == {"ib-completion-error"} and "status 99" in report.findings[0].message
    assert report.status == "fail"


def test_a_successful_completion_traced_is_no_error() -> None:
    """Must not: NCCL_DEBUG=TRACE prints every completion (net_ib.cc's TRACE format), status 0 is success."""
    trace = HEAD + "transport/net_ib.cc:1980 NCCL TRACE Got completion from peer 10.0.0.2<5000> with status=0 opcode=0"
    report = read(trace + " len=0 wr_id=0 r=0x7f r=0x55 type=1 events={1,0,0,0}, i=0")
    assert report.findings == () and report.status == "pass"


# --- ibv_event_type: the benign SM events stay information, every other named event is read
SHAPES = {  # each release's shape of the event thread's WARN (net_ib.cc, net_ib/common.cc)
    "2.19": HEAD + "transport/net_ib.cc:95 NCCL WARN NET/IB : Got async event : {words}",
    "2.22": HEAD + "transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_2:1 Got async event : {words}",
    "2.23": HEAD + "transport/net_ib.cc:168 NCCL WARN NET/IB : mlx5_2:1 Got async error event: {words}",
    "2.29": HEAD + "transport/net_ib/common.cc:179 NCCL WARN NET/IB : mlx5_2:1 Got non-fatal async event: {words}({n})",
    "fatal": HEAD + "transport/net_ib.cc:140 NCCL WARN NET/IB : mlx5_2:1 async fatal event: {words}",
    "number": HEAD + "transport/net_ib/common.cc:184 NCCL WARN NET/IB : mlx5_2:1 unknown event type ({n})",
}
KIND = {BENIGN: ("ib-sm-event", "pass"), NOTICE: ("ib-async-notice", "pass"), FAULT: ("ib-async-fault", "fail")}
CASES = [
    pytest.param(e, shape, id=f"{e.number}-{shape}")
    for e in ASYNC_EVENTS
    for shape in SHAPES
    if e.words is not None or shape == "number"
]


@pytest.mark.parametrize(("event", "shape"), CASES)
def test_every_async_event_is_read_by_its_kind(event: object, shape: str) -> None:
    """Must fire: a fault fails on the HCA and port the line names; must not: a benign or notice event fails."""
    assert hasattr(event, "kind") and hasattr(event, "number") and hasattr(event, "words")
    report = read(SHAPES[shape].format(words=event.words, n=event.number))
    fid, status = KIND[event.kind]
    assert ids(report) == {fid} and report.status == status
    if shape != "2.19":
        assert "(mlx5_2:1)" in report.findings[0].message


def test_each_fatal_event_shape_names_the_hca_port() -> None:
    """The CQ, QP and SRQ forms (2.23 and 2.30.7's longer ones) are faults on that port."""
    lines = [
        "async fatal event on QP (0x55d0c0a1b2c0): local work queue catastrophic error",
        "async fatal event on QP (0x55d0c0a1b2c0) qpn=1234 handle=5 send_cq=3 recv_cq=3 state=6 sq_psn=77 rq_psn=88:"
        " local access violation work queue error",
        "async fatal event on CQ (0x55d0c0a1b2c0) handle=2 cqe=4096: CQ error",
        "async fatal event on SRQ, unused for now (0x55d0c0a1b2c0): SRQ catastrophic error",
    ]
    for line in lines:
        report = read(HEAD + f"transport/net_ib.cc:152 NCCL WARN NET/IB : mlx5_4:1 {line}")
        assert ids(report) == {"ib-async-fault"} and "(mlx5_4:1)" in report.findings[0].message, line


def test_the_benign_event_of_a_real_log_stays_information() -> None:
    """Must not (tests/fixtures/nccl_logs_more M10): a client reregistration after init is no failure."""
    real = "gpu1:5021:5386 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : client reregistration"
    report = read(INIT, real, HEAD + "transport/net_ib.cc:198 NCCL WARN NET/IB : mlx5_2:1 GID table changed")
    assert ids(report) == {"ib-sm-event"} and report.status == "pass"


def test_an_undefined_event_number_is_a_notice_not_an_unexplained_line() -> None:
    report = read(SHAPES["number"].format(n=77))
    assert ids(report) == {"ib-async-notice"} and "77" in report.findings[0].message


# --- networks and HCA lists read whole
def test_a_network_name_with_a_space_is_read_whole() -> None:
    """M04 (tests/fixtures/nccl_logs_more): aws-ofi-nccl's "AWS Libfabric", and its transport in a channel line."""
    report = read(
        "ip-10-216-179-119:416602:416643 [1] NCCL INFO Using network AWS Libfabric",
        "ip-10-216-179-119:416602:416643 [1] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/AWS Libfabric/1/GDRDMA",
    )
    (rank,) = report.ranks
    assert rank.network == "AWS Libfabric"
    assert [(c.transport, c.kind) for c in rank.connections] == [("NET/AWS Libfabric/1/GDRDMA", "NET")]


def test_hca_suffixes_are_kept_and_their_link_layer_read() -> None:
    """Must fire: IB ports with SHARP and RoCE ports together are mixed; must not: IB with and without SHARP."""
    mixed = read(HEAD + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>")
    assert mixed.ranks[0].net_devices == ("mlx5_0:1/IB/SHARP", "mlx5_1:1/RoCE")
    assert "mixed-link-layers" in ids(mixed)
    same = read(HEAD + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>")
    assert same.ranks[0].network == "IB" and "mixed-link-layers" not in ids(same)


# --- no RDMA library, no plugin configured
SOCKET_INIT = (
    HEAD + "NCCL INFO NET/IB : No device found.",
    HEAD + "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    HEAD + "NCCL INFO Using network Socket",
    INIT,
)


@pytest.mark.parametrize("level", ["WARN", "INFO"])  # a WARN in NCCL 2.4-2.10, an INFO since (ibvwrap.cc)
def test_no_libibverbs_on_a_socket_host_is_information(level: str) -> None:
    report = read(HEAD + f"NCCL {level} Failed to open libibverbs.so[.1]", *SOCKET_INIT)
    assert "ib-verbs-missing" in ids(report) and report.status == "pass"
    assert next(f for f in report.findings if f.id == "ib-verbs-missing").severity == "info"


def test_no_libibverbs_then_an_ib_failure_still_fails() -> None:
    """Must not pass: the job expected IB after all; the IB failure is the cause, the missing library no excuse."""
    report = read(HEAD + "NCCL INFO Failed to open libibverbs.so[.1]", NUMBERED.format(n=12))
    assert report.status == "fail" and report.root_cause is not None and report.root_cause.id == "ib-retry-exceeded"


def test_the_default_plugin_missing_is_no_finding() -> None:
    """net.cc 2.12-2.21 and 2.22-2.26: no plugin configured, NCCL tried libnccl-net.so and went on."""
    report = read(
        HEAD + "NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such"
        " file or directory.",
        HEAD + "NCCL INFO NET/Plugin: libnccl-net.so: cannot open shared object file: No such file or directory",
        HEAD + "NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        *SOCKET_INIT,
    )
    assert "net-plugin-failed" not in ids(report) and report.status == "pass"


@pytest.mark.parametrize(
    "line",
    [
        "NET/Plugin : Plugin load returned 2 : libnccl-net-aws.so: cannot open shared object file: No such file or"
        " directory.",  # NCCL_NET_PLUGIN=aws: a plugin the user named
        "NET/Plugin : Plugin load returned 2 : libfabric.so.1: cannot open shared object file: No such file or"
        " directory.",  # the default plugin is there, its library is not
        "NET/Plugin: libnccl-net.so: libfabric.so.1: cannot open shared object file: No such file or directory",
        "Failed to initialize NET plugin AWS Libfabric",
    ],
)
def test_a_plugin_that_is_there_or_named_and_fails_stays_a_finding(line: str) -> None:
    assert "net-plugin-failed" in ids(read(HEAD + "NCCL INFO " + line))


# --- socket connects: retries, their last one, stray connections
RETRY = HEAD + "NCCL INFO socketStartConnect: connect to 10.0.0.2<40123> returned {why}, retrying ({n}/34) after"
RETRY += " sleep for {ms} msec"  # socket.cc 2.27 and later (os/linux.cc since 2.29)


@pytest.mark.parametrize("why", ["Connection refused", "No route to host", "Connection timed out"])
def test_the_last_retry_is_a_failed_connection_naming_the_peer(why: str) -> None:
    report = read(*(RETRY.format(why=why, n=n, ms=n * 100) for n in (32, 33, 34)))
    assert "connect-failed" in ids(report) and report.status == "fail"
    failed = next(f for f in report.findings if f.id == "connect-failed")
    assert "10.0.0.2<40123>" in failed.message and why in failed.message and "34/34" in failed.message


def test_the_last_retry_without_the_peer_2_26() -> None:
    """NCCL 2.25-2.26 name no peer: the failure says so, and still fails."""
    line = HEAD + "NCCL INFO socketPollConnect: connect returned Connection refused, retrying (34/34) after sleep"
    report = read(line + " for 3400 msec")
    assert ids(report) == {"connect-failed"} and "does not name the peer" in report.findings[0].message


def test_retries_that_stop_early_then_init_completes_are_information() -> None:
    report = read(*(RETRY.format(why="Connection refused", n=n, ms=n * 100) for n in (1, 2, 3)), INIT)
    assert ids(report) == {"connect-retried"} and report.status == "pass"
    assert report.findings[0].severity == "info" and "10.0.0.2<40123>" in report.findings[0].message


@pytest.mark.parametrize(
    "line", ["socketStartConnect: exceeded retries (20000)", "socketPollConnect: exceeded timeouts (3)"]
)
def test_the_2_16_to_2_23_give_up_lines_fail(line: str) -> None:
    report = read(HEAD + "misc/socket.cc:466 NCCL WARN " + line)
    assert ids(report) == {"connect-failed"} and report.status == "fail"


@pytest.mark.parametrize(
    "line",
    [
        "misc/socket.cc:432 NCCL WARN socketFinalizeAccept: wrong magic 474554202f20485454 != 3c1d9a2f7e4b0c11",
        "NCCL INFO socketFinalizeAccept: didn't receive a valid magic from 10.0.0.9<51234>",
    ],
)
def test_a_stray_connection_is_named_with_its_fix_and_no_failure_alone(line: str) -> None:
    report = read(HEAD + line, INIT)
    (finding,) = report.findings
    assert finding.id == "socket-wrong-magic" and finding.severity == "warning" and report.status == "pass"
    assert "#1808" in finding.fix


# --- SLURM's abort notice and the proxy's teardown line
def test_srun_abort_notice_is_an_echo_of_the_cancel() -> None:
    """A public SLURM log (find_string): the cancel is the cause, srun's notice its echo, nothing unexplained."""
    report = read(
        "slurmstepd: error: *** STEP 524547.1 ON ault43 CANCELLED AT 2024-10-09T23:20:53 ***",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    )
    assert ids(report) == {"slurm-cancelled", "slurm-step-aborted"}
    assert report.root_cause is not None and report.root_cause.id == "slurm-cancelled"


def test_srun_abort_notice_alone_is_no_pass() -> None:
    report = read("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    assert ids(report) == {"slurm-step-aborted"} and report.status == "fail"


def test_the_proxy_teardown_line_is_information() -> None:
    """M13/16 (tests/fixtures/nccl_logs): every rank prints it when its communicator is destroyed."""
    line = "kolyoz2:25146:25852 [0] NCCL INFO [Service thread] Connection closed by localRank 0"
    healthy = read(INIT, line)
    assert ids(healthy) == {"proxy-peer-closed"} and healthy.status == "pass"
    failed = read(NUMBERED.format(n=4), line)
    assert failed.root_cause is not None and failed.root_cause.id == "ib-local-protection"
