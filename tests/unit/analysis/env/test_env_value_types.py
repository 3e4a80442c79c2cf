"""env.vars: each NCCL variable's value against its type in ncclcheck/data/env_vars.tsv, and "did you mean" only
towards a name that can take the value.

Types come from NVIDIA/nccl's sources: ``NCCL_PARAM(Nthreads, "NTHREADS", -2)`` (src/graph/tuning.cc) is an int64
read with ``strtoll(str, nullptr, 0)`` (src/misc/param.cc: "abc" reads as 0, the default thread count);
``NCCL_NET`` is compared with ``strcasecmp`` to each net's name, "IB" (src/transport/net_ib/common.cc) and
"Socket" (src/transport/net_socket.cc), and no match ends in ``WARN("Failed to initialize any NET plugin")``
(src/plugin/net.cc); ``NCCL_PARAM(IbTimeout, "IB_TIMEOUT", 20)`` (src/transport/net_ib/connect.cc) is an exponent.
"""

from __future__ import annotations

import pytest
from snapshots import bare, check

from ncclcheck.analysis.env.known_vars import known_vars
from ncclcheck.model.checks import Status


@pytest.mark.parametrize(
    ("env", "status", "words"),
    [
        ({"NCCL_NTHREADS": "abc"}, Status.WARN, "NCCL_NTHREADS=abc is not a number: NCCL reads it as 0"),
        ({"NCCL_LL128_NTHREADS": "lots"}, Status.WARN, "NCCL_LL128_NTHREADS=lots is not a number"),
        ({"NCCL_NET": "Sockets"}, Status.FAIL, "did you mean Socket?"),
        ({"NCCL_NET": "IBB"}, Status.FAIL, "did you mean IB?"),
        ({"NCCL_NET": "AWS Libfabric"}, Status.WARN, "unless a loaded net plugin has that name"),
        ({"NCCL_IB_DISABLE": "yes"}, Status.FAIL, "NCCL_IB_DISABLE=yes is not a number"),
        ({"NCCL_IB_TIMEOUT": "1800"}, Status.WARN, "NCCL_IB_TIMEOUT=1800 is outside 1..31"),
        ({"NCCL_LAUNCH_MODE": "GRUOP"}, Status.WARN, "did you mean GROUP?"),
        ({"NCCL_IB_ADDR_FAMILY": "af_inet"}, Status.WARN, "case-sensitive"),
        ({"NCCL_P2P_LEVEL": "pxb"}, Status.WARN, "NCCL_P2P_LEVEL=pxb is not a value NCCL knows"),
        ({"NCCL_DEBUG": "VERBOSE"}, Status.WARN, "NCCL_DEBUG=VERBOSE is not a value NCCL knows"),
    ],
)
def test_a_value_its_type_does_not_take_is_said(env: dict[str, str], status: Status, words: str) -> None:
    result = check(bare(env), "env.vars")
    assert result.status is status, result
    assert words in result.summary + "\n".join(result.details)


@pytest.mark.parametrize(
    "env",
    [
        {"NCCL_NTHREADS": "256"},
        {"NCCL_NET": "Socket"},
        {"NCCL_NET": "socket"},  # strcasecmp
        {"NCCL_NET": "ib"},
        {"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "aws-ofi-nccl"},  # a plugin's own name
        {"NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7"},
        {"NCCL_CHECK_MODE": "debug_local"},  # strcasecmp
        {"NCCL_IB_ADDR_FAMILY": "AF_INET6"},
        {"NCCL_P2P_LEVEL": "PXB"},
        {"NCCL_NET_GDR_LEVEL": "3"},  # ncclGetLevel takes a number too
        {"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "INIT,NET"},
        {"NCCL_COLLNET_ENABLE": "0x1"},  # strtol base 0
        {"NCCL_TOPO_FILE": "/etc/nccl/topo.xml"},  # text: not checked
    ],
)
def test_values_their_type_takes_make_no_finding(env: dict[str, str]) -> None:
    leftovers = {"NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"}  # valid, but debugging leftovers (said as such)
    result = check(bare(env), "env.vars")
    if leftovers & set(env):
        assert "not a value" not in result.summary + "\n".join(result.details), result
    else:
        assert result.status is Status.OK, result


def test_every_nccl_param_row_is_an_integer_and_every_named_row_lists_its_names() -> None:
    for var in known_vars().by_name.values():
        readers = set(var.how_read.split(","))
        if readers == {"NCCL_PARAM"}:
            assert var.type == "int", var
        if var.type in ("name", "exact", "level", "names", "net"):
            assert var.allowed, var


def test_nccl_timeout_is_not_renamed_to_the_ib_exponent() -> None:
    """NCCL_TIMEOUT=1800 meant the process group's timeout; NCCL_IB_TIMEOUT=1800 would be invalid (1..31)."""
    result = check(bare({"NCCL_TIMEOUT": "1800"}), "env.vars")
    assert result.status is Status.WARN
    assert "did you mean" not in result.summary and "rename" not in result.fix
    assert "process group" in result.summary
    assert "init_process_group(backend='nccl', timeout=timedelta(seconds=1800))" in result.fix


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [("NCCL_IB_TIMOUT", "1800", "NCCL_IB_TIMEOUT"), ("NCCL_NETT", "banana", "NCCL_NET")],
)
def test_a_did_you_mean_never_proposes_a_value_the_target_cannot_take(name: str, value: str, hint: str) -> None:
    result = check(bare({name: value}), "env.vars")
    assert result.status is Status.WARN
    assert f"did you mean {hint}" not in result.summary and f"rename {name}" not in result.fix
    assert f"the nearest name, {hint}, cannot take {value!r}" in result.summary


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("NCCL_IB_TIMOUT", "22", "NCCL_IB_TIMEOUT"),
        ("NCCL_NETT", "Socket", "NCCL_NET"),
        ("NCCL_IB_HCAS", "mlx5_0", "NCCL_IB_HCA"),
    ],
)
def test_a_did_you_mean_stays_where_the_target_takes_the_value(name: str, value: str, hint: str) -> None:
    result = check(bare({name: value}), "env.vars")
    assert f"did you mean {hint}?" in result.summary and f"rename {name} to {hint}" in result.fix
